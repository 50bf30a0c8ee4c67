'use strict'

// Stand-in for @toa.io/extensions.configuration, to the contract of extensions/configuration/
// source/manifest.ts and deployment.ts (toa-io/toa). A component's `configuration` section is
// its schema (manifest() makes a bare schema {schema}); the annotation's keys are component ids
// (a key without a dot is in the namespace `default`), each a component that declares
// `configuration`; its values become TOA_CONFIGURATION_<COMPONENT>, and every value written
// `$NAME` a reference to the key NAME of the Secret toa-configuration. The values are JSON, as
// Toa 1.0.0-alpha.289's packages write them (1.0.0-alpha.110 wrote base64; no ESM configuration
// was found in toa-io/toa, so the encoding follows its sibling packages of that era).

const assert = require('node:assert')

const SECRET_RX = /^\$(?<variable>[A-Z0-9_]{1,32})$/
const PREFIX = 'TOA_CONFIGURATION_'

exports.manifest = function manifest (manifest) {
  if (manifest === null || typeof manifest !== 'object') throw new Error('Configuration manifest must be an object')
  if (manifest.schema === undefined) manifest = { schema: manifest }

  return manifest
}

exports.deployment = function deployment (instances, annotation = {}) {
  validate(annotation, instances)

  const variables = {}

  for (const instance of instances) {
    const values = annotation[instance.locator.id]

    if (values === undefined) continue

    variables[instance.locator.label] = [
      { name: PREFIX + instance.locator.uppercase, value: JSON.stringify(values) },
      ...createSecrets(values)
    ]
  }

  return { variables }
}

function validate (annotation, instances) {
  const requested = instances.map((instance) => instance.locator.id)

  for (let id of Object.keys(annotation)) {
    if (!id.includes('.')) {
      const newid = 'default.' + id

      annotation[newid] = annotation[id]
      delete annotation[id]
      id = newid
    }

    assert.ok(requested.includes(id), `Component '${id}' does not request configuration or does not exist.`)
  }
}

function createSecrets (values) {
  const secrets = []

  for (const value of Object.values(values)) {
    if (typeof value === 'object' && value !== null) secrets.push(...createSecrets(value))
    if (typeof value !== 'string') continue

    const match = value.match(SECRET_RX)

    if (match !== null)
      secrets.push({ name: PREFIX + '_' + match.groups.variable, secret: { name: 'toa-configuration', key: match.groups.variable } })
  }

  return secrets
}
