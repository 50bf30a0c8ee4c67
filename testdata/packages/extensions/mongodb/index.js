'use strict'

// Stand-in for @toa.io/storages.mongodb, to the contract of connectors/storages.mongodb/src/
// deployment.js (toa-io/toa): each component that stores its entity in MongoDB gets, through
// @toa.io/pointer, the URIs of the deepest selector of the annotation that matches its id, and
// references to the credentials of that selector's Secret.

const { createVariables } = require('@toa.io/pointer')

const ID = 'mongodb'

exports.ID = ID

exports.deployment = function deployment (instances, annotation) {
  const requests = instances.map((instance) => ({ group: instance.locator.label, selectors: [instance.locator.id] }))

  return { variables: createVariables(ID, annotation, requests) }
}
