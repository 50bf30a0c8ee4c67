'use strict'

// Stand-in for @toa.io/extensions.configuration, to the contract of
// extensions/configuration/source/deployment.ts (toa-io/toa): the annotation's keys are
// component ids (a key without a dot is in the namespace `default`), each a component that
// declares `configuration`; its values become TOA_CONFIGURATION_<COMPONENT>, and every value
// written `$NAME` a reference to the key NAME of the Secret toa-configuration.

const assert = require('node:assert')

const SECRET_RX = /^\$(?<variable>[A-Z0-9_]{1,32})$/
const PREFIX = 'TOA_CONFIGURATION_'

exports.deployment = function deployment (instances, annotation = {}) {
  const requested = instances.map((instance) => instance.locator.id)
  const normalized = {}

  for (const [key, values] of Object.entries(annotation)) {
    const id = key.includes('.') ? key : 'default.' + key

    assert.ok(requested.includes(id), `Component '${id}' does not request configuration or does not exist.`)
    normalized[id] = values
  }

  const variables = {}

  for (const instance of instances) {
    const values = normalized[instance.locator.id]

    if (values === undefined) continue

    variables[instance.locator.label] = [
      { name: PREFIX + instance.locator.uppercase, value: encode(values) },
      ...secrets(values)
    ]
  }

  return { variables }
}

function secrets (values) {
  const out = []

  for (const value of Object.values(values)) {
    if (typeof value === 'object' && value !== null) out.push(...secrets(value))
    if (typeof value !== 'string') continue

    const match = value.match(SECRET_RX)

    if (match !== null)
      out.push({ name: PREFIX + '_' + match.groups.variable, secret: { name: 'toa-configuration', key: match.groups.variable } })
  }

  return out
}

function encode (value) {
  return Buffer.from(JSON.stringify(value)).toString('base64')
}
