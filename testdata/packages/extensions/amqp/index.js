'use strict'

// Stand-in for @toa.io/bindings.amqp, to the contract of connectors/bindings.amqp/source/
// deployment.ts and its deployment/{annotation,context,sources}.ts (toa-io/toa): the annotation
// is a URI, a list of them, or {context, sources}; the context's broker is global
// (TOA_AMQP_CONTEXT and the credentials' secret references), and a component whose receivers
// name a `source` gets that foreign broker's URI and credentials.

const assert = require('node:assert')

exports.deployment = function deployment (instances, declaration) {
  const annotation = normalize(declaration)
  const global = [{ name: 'TOA_AMQP_CONTEXT', value: encode(annotation.context) }]

  for (const key of Object.keys(annotation.context)) {
    const suffix = key === '.' ? '' : key.toUpperCase().replaceAll(/[-.]/g, '_')

    for (const field of ['USERNAME', 'PASSWORD'])
      global.push({
        name: `TOA_AMQP_CONTEXT_${suffix}_${field}`,
        secret: { name: 'toa-amqp-context' + (key === '.' ? '.default' : '-' + key), key: field.toLowerCase() }
      })
  }

  const variables = { global }

  for (const instance of instances) {
    for (const receiver of Object.values(instance.component.receivers ?? {})) {
      const source = receiver.source

      if (source === undefined) continue

      const uri = annotation.sources?.[source]

      assert.ok(uri !== undefined, `Source '${source}' of '${instance.locator.id}' is not declared in the amqp annotation`)

      const upper = source.toUpperCase().replaceAll(/[-.]/g, '_')

      ;(variables[instance.locator.label] ??= []).push(
        { name: `TOA_AMQP_SOURCES_${upper}`, value: [uri].flat().join(' ') },
        { name: `TOA_AMQP_SOURCES_${upper}_USERNAME`, secret: { name: `toa-amqp-sources-${source}`, key: 'username' } },
        { name: `TOA_AMQP_SOURCES_${upper}_PASSWORD`, secret: { name: `toa-amqp-sources-${source}`, key: 'password' } })
    }
  }

  return { variables }
}

function normalize (declaration) {
  assert.ok(declaration !== undefined, "'amqp' context annotation is required")

  if (typeof declaration === 'string' || Array.isArray(declaration))
    return { context: { '.': [declaration].flat() } }

  const context = declaration.context

  return {
    context: typeof context === 'string' || Array.isArray(context) ? { '.': [context].flat() } : context,
    sources: declaration.sources
  }
}

function encode (value) {
  return Buffer.from(JSON.stringify(value)).toString('base64')
}
