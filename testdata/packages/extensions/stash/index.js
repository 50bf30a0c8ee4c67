'use strict'

// Stand-in for @toa.io/extensions.stash, to the contract of extensions/stash/source/extension.ts
// (toa-io/toa): each component that declares `stash` gets, through @toa.io/pointer under the id
// `stash`, the Redis URIs of the deepest selector of the annotation that matches its id (redis:
// URIs carry no credentials, so there are no secret references).

const { createVariables } = require('@toa.io/pointer')

const ID = 'stash'

exports.ID = ID

exports.deployment = function deployment (instances, annotation) {
  const requests = instances.map((instance) => ({ group: instance.locator.label, selectors: [instance.locator.id] }))

  return { variables: createVariables(ID, annotation, requests) }
}
