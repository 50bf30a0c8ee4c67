'use strict'

// Stand-in for @toa.io/storages.mongodb, to the contract of connectors/storages.mongodb/src/
// deployment.js and @toa.io/pointer's createVariables (toa-io/toa): the annotation is a URI, a
// list of them, or a map of selectors (a component id, a namespace, or '.') to them; each
// component that stores its entity in MongoDB gets the URIs of the deepest selector that
// matches it, and references to the Secret of that selector's credentials.

const assert = require('node:assert')

const ID = 'mongodb'

exports.deployment = function deployment (instances, annotation) {
  assert.ok(annotation !== undefined, "'mongodb' context annotation is required")

  const records = typeof annotation === 'string' || Array.isArray(annotation) ? { '.': annotation } : annotation
  const variables = {}

  for (const instance of instances) {
    const { id, label, namespace } = instance.locator
    const key = [id, namespace, '.'].find((selector) => records[selector] !== undefined)

    assert.ok(key !== undefined, `Selector '${id}' cannot be resolved.`)

    const uris = [records[key]].flat()

    for (const uri of uris)
      assert.ok(!/^[a-z+]+:\/\/[^/]*@/.test(uri), `URI '${uri}' must not contain credentials`)

    const name = variable(ID, id)
    const secret = 'toa-' + [ID, key].join('-').replaceAll('.', '-').replace(/--$/, '.default')

    variables[label] = [
      { name, value: uris.join(' ') },
      { name: name + '_USERNAME', secret: { name: secret, key: 'username' } },
      { name: name + '_PASSWORD', secret: { name: secret, key: 'password' } }
    ]
  }

  return { variables }
}

function variable (...segments) {
  return 'TOA_' + segments.join('_').replaceAll(/[-.]/g, '_').toUpperCase()
}
