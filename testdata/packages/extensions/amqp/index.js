'use strict'

// Stand-in for @toa.io/bindings.amqp, to the contract of connectors/bindings.amqp/source/index.js,
// deployment.ts and deployment/{annotation,context,sources}.ts (toa-io/toa), in the era of Toa
// 1.0.0-alpha.289, whose packages write their values as JSON (the ESM deployment/context.ts:
// `JSON.stringify(context)`) where 1.0.0-alpha.110 wrote base64. The annotation is a URI, a list
// of them, or {context, sources}, each a pointer map (@toa.io/pointer): the context's broker is
// global (TOA_AMQP_CONTEXT and the credentials of each of its keys), and a component whose
// receivers name a `source` gets that broker's URIs and credentials.

const pointer = require('@toa.io/pointer')

exports.properties = { async: true }

exports.deployment = function deployment (instances, declaration) {
  const annotation = normalize(declaration)
  const global = createContextVariables(annotation.context)
  const sources = createSourcesVariables(annotation.sources, instances)

  return { variables: { global, ...sources } }
}

function normalize (declaration) {
  const annotation = expand(declaration)

  return { context: pointer.normalize(annotation.context), sources: pointer.normalize(annotation.sources) }
}

function expand (declaration) {
  if (typeof declaration === 'string') return { context: { '.': [declaration] } }
  else if (Array.isArray(declaration)) return { context: { '.': declaration } }
  else return declaration
}

const CONTEXT = 'amqp-context'
const SOURCES = 'amqp-sources'

function createContextVariables (context) {
  const variables = [{ name: 'TOA_AMQP_CONTEXT', value: JSON.stringify(context) }]

  for (const key of Object.keys(context))
    for (const secretKey of ['username', 'password'])
      variables.push({
        name: pointer.naming.nameVariable(CONTEXT, key === '.' ? '' : key, secretKey.toUpperCase()),
        secret: { name: pointer.naming.nameSecret(CONTEXT, key), key: secretKey }
      })

  return variables
}

function createSourcesVariables (sources, instances) {
  const requests = []

  for (const instance of instances) {
    const receivers = instance.component.receivers

    if (receivers === undefined) continue

    const selectors = Object.values(receivers).map((receiver) => receiver.source).filter((source) => source !== undefined)

    requests.push({ group: instance.locator.label, selectors })
  }

  return pointer.createVariables(SOURCES, sources, requests)
}
