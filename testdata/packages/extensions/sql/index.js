'use strict'

// Stand-in for @toa.io/storages.sql, to the contract of connectors/storages.sql/src/deployment.js
// and .deployment/validate.js (toa-io/toa): the annotation is checked as Toa checks it (a URI
// with a database, no table where it names no component, no schema for `default`), then each
// component that stores its entity in SQL gets its URIs and credentials through @toa.io/pointer.

const { createVariables } = require('@toa.io/pointer')

const ID = 'sql'

exports.ID = ID

exports.deployment = function deployment (instances, annotation) {
  validate(annotation)

  const requests = instances.map((instance) => ({ group: instance.locator.label, selectors: [instance.locator.id] }))

  return { variables: createVariables(ID, annotation, requests) }
}

function validate (uris) {
  if (uris === undefined || uris === null) throw new Error('SQL annotation is required')

  if (typeof uris !== 'string' && typeof uris !== 'object')
    throw new Error('SQL annotation must be a string or an object')

  if (typeof uris === 'string') test('default', uris)
  else for (const [key, value] of Object.entries(uris)) test(key, value)
}

function test (key, value) {
  const error = (message) => { throw new Error(`SQL annotation '${key}' ${message}`) }
  const url = new URL(value)

  if (url.pathname === '') error('must contain path')

  const common = !key.includes('.')
  const [, database, schema, table] = url.pathname.split('/')

  if (database === '') error('database name must not be empty')
  if (common && table !== undefined) error('must not contain table name')
  if (key === 'default' && schema !== undefined) error('must not contain schema name')
}
