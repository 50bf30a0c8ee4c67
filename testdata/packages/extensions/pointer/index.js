'use strict'

// Stand-in for @toa.io/pointer, the library Toa's connectors (bindings.amqp, storages.mongodb,
// storages.sql) and extensions (stash, origins) write their variables with. It follows
// libraries/pointer/source/{annotation,Deployment,createVariables,naming,resolve}.ts and the
// shards()/range() of libraries/generic/source (toa-io/toa): an annotation is a URI, a list of
// them, or a map of selectors ('.', a namespace, a component id) to them; `host{0-2}` expands to
// three URIs; a URI carries no credentials. Each request (a group, its selectors) gets, for each
// selector, the URIs of the deepest record that matches it and, unless the protocol is http(s)
// or redis, references to the username and password of that record's Secret.

// libraries/pointer/schemas/urimap.cos.yaml
const KEY = /^[a-zA-Z0-9]{1,32}(\.[a-zA-Z0-9]{1,32}){0,3}$/

function normalize (declaration) {
  const map = {}

  if (declaration === undefined) return map

  if (typeof declaration === 'string' || Array.isArray(declaration))
    declaration = { '.': declaration }

  for (const [key, value] of Object.entries(declaration))
    if (typeof value === 'string') map[key] = format([value])
    else map[key] = format(value)

  validate(map)

  return map
}

function format (values) {
  return values.map(shards).flat()
}

function validate (map) {
  for (const [key, uris] of Object.entries(map)) {
    if (key !== '.' && !KEY.test(key)) throw new Error(`Pointer annotation key '${key}' is not valid`)
    if (!Array.isArray(uris) || uris.length === 0) throw new Error(`Pointer annotation '${key}' must be a URI or a list of URIs`)

    for (const uri of uris) checkCredentials(uri)
  }
}

function checkCredentials (uri) {
  const url = new URL(uri)

  if (url.username !== '' || url.password !== '')
    throw new Error(`Pointer URI '${uri}' must not contain credentials. ` +
      'Please refer to the "Credentials" section of the documentation for more information.')
}

function createVariables (id, declaration, requests) {
  const annotation = normalize(declaration)
  const variables = {}

  for (const request of requests) {
    variables[request.group] = []

    for (const selector of request.selectors)
      variables[request.group].push(createVariable(id, annotation, selector), ...createSecrets(id, annotation, selector))
  }

  return variables
}

function createVariable (id, annotation, selector) {
  const { references } = resolveRecord(annotation, selector)

  return { name: nameVariable(id, selector), value: references.join(' ') }
}

const INSECURE = ['http:', 'https:', 'redis:']

const SPECIAL = {
  'pubsub:': (references) => {
    const [, , project] = new URL(references[0]).pathname.split('/')

    return [{ name: nameVariable('ORIGINS_PUBSUB_', project), secret: { name: 'toa-origins-pubsub', key: project, optional: true } }]
  }
}

function createSecrets (id, annotation, selector) {
  const { key, references } = resolveRecord(annotation, selector)
  const protocol = new URL(references[0]).protocol

  if (INSECURE.includes(protocol)) return []
  if (protocol in SPECIAL) return SPECIAL[protocol](references)

  return ['username', 'password'].map((token) => ({
    name: nameVariable(id, selector, token),
    secret: { name: nameSecret(id, key), key: token }
  }))
}

function resolveRecord (uris, selector) {
  if (selector in uris) return { key: selector, references: uris[selector] }

  const segments = selector.split('.')

  while (segments.pop() !== undefined) {
    const current = segments.join('.')

    if (current in uris) return { key: current, references: uris[current] }
  }

  if ('.' in uris) return { key: '.', references: uris['.'] }

  throw new Error(`Selector '${selector}' cannot be resolved.`)
}

function nameVariable (...segments) {
  return 'TOA_' + segments.join('_').replaceAll(/[-.]/g, '_').toUpperCase()
}

function nameSecret (...segments) {
  return 'toa-' + segments.join('-').replaceAll('.', '-').replace(/--$/, '.default')
}

// libraries/generic/source/shards.js and range.js
function shards (input) {
  const match = input.match(RANGE)

  if (match === null) return [input]

  return range(match.groups.range).map((number) => input.replace(RANGE, String(number)))
}

const RANGE = /{(?<range>[0-9]{1,8}-[0-9]{1,8})}/

function range (input) {
  return input.split(',').map((part) => {
    const [left, right] = part.trim().split(/-|\.\./)
    const min = Number(left)
    const max = right === undefined ? min : Number(right)
    const out = []

    for (let i = min; i <= max; i++) out.push(i)

    return out
  }).flat()
}

exports.normalize = normalize
exports.createVariables = createVariables
exports.resolveRecord = resolveRecord
exports.naming = { nameVariable, nameSecret }
