'use strict'

// Stand-in for @toa.io/extensions.exposition, to the contract of extensions/exposition/source/
// deployment.ts (toa-io/toa, the newest, of the era of Toa 1.0.0-alpha.289: JSON values, the
// published image, the probe on 8004), manifest.ts, Composition.ts and RTD/syntax/parse.ts.
//
// - manifest(declaration, manifest): a component's `exposition` section is a tree of routes; it
//   is placed under /<namespace>/<name> (the namespace `default` left out), parsed into a node,
//   and each method's endpoint is bound to the component, which must have the operation.
// - deployment(_, annotation): one service, the gateway, on port 8000 with its readiness probe on
//   8004, an ingress at '/' whose hosts are the authorities' (class and annotations only where
//   the annotation gives them, so that the context's `ingress` fills the gaps), and the
//   components it runs itself; TOA_EXPOSITION is the annotation's own tree (`/`), parsed, and
//   only where it has one: the components' trees reach the gateway at run time, not here.
// - components(): its own components (identity.tokens), which Toa loads as the context's.

const { readdirSync } = require('node:fs')
const { resolve } = require('node:path')
const assert = require('node:assert')

const PORT = 8000
const PROBE = 8004
const DELAY = 3

const image = 'ghcr.io/toa-io/extension-exposition-gateway'

exports.image = image

exports.manifest = function manifest (declaration, manifest) {
  assert.ok(typeof declaration === 'object' && declaration !== null, 'Exposition declaration must be an object')

  const path = (manifest.namespace === undefined || manifest.namespace === 'default' ? '' : '/' + manifest.namespace) +
    '/' + manifest.name
  const node = parse({ [path]: declaration }, shortcuts)

  specify(node, manifest)

  return node
}

exports.deployment = function deployment (_, annotation) {
  if (annotation === undefined) throw new Error('Exposition context annotation is required')

  assert.ok(typeof annotation.authorities === 'object' && annotation.authorities !== null,
    "Exposition annotation must declare 'authorities'")

  const service = {
    group: 'exposition',
    name: 'gateway',
    image,
    port: PORT,
    version: require('./package.json').version,
    variables: [],
    components: components().labels,
    resources: annotation.resources,
    ingress: { path: '/', hosts: [] },
    probe: { path: '/.ready', port: PROBE, delay: DELAY }
  }

  if (annotation['/'] !== undefined)
    service.variables.push({ name: 'TOA_EXPOSITION', value: JSON.stringify(parse(annotation['/'], shortcuts)) })

  const { debug, authorities } = annotation

  service.ingress.hosts = Object.values(authorities)

  if (annotation.class !== undefined) service.ingress.class = annotation.class
  if (annotation.annotations !== undefined) service.ingress.annotations = annotation.annotations
  if (annotation.service?.annotations !== undefined) service.annotations = annotation.service.annotations

  const properties = { authorities }

  if (debug === true) properties.debug = true

  for (const key of ['protocol', 'ip', 'bouncer', 'censor', 'oauth', 'rpc', 'mcp'])
    if (annotation[key] !== undefined) properties[key] = annotation[key]

  service.variables.push({ name: 'TOA_EXPOSITION_PROPERTIES', value: JSON.stringify(properties) })
  service.variables.push({ name: 'TOA_TELEMETRY_READY', value: JSON.stringify(false) })

  return { services: [service] }
}

const ROOT = resolve(__dirname, 'components')

function components () {
  const entries = readdirSync(ROOT, { withFileTypes: true }).filter((entry) => entry.isDirectory())

  return { labels: entries.map((entry) => entry.name.replace('.', '-')), paths: entries.map((entry) => resolve(ROOT, entry.name)) }
}

exports.components = components

// RTD/syntax/parse.ts

const verbs = new Set(['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE', 'LOCK', 'UNLOCK'])
const DIRECTIVE_RX = /^(?<family>\w{1,32}):(?<name>\w{1,32})$/

// Directive.ts
const shortcuts = new Map([
  ['anonymous', 'auth:anonymous'],
  ['anyone', 'auth:anyone'],
  ['id', 'auth:id'],
  ['role', 'auth:role'],
  ['rule', 'auth:rule'],
  ['incept', 'auth:incept'],
  ['input', 'io:input'],
  ['output', 'io:output'],
  ['languages', 'map:languages']
])

function parse (input, shortcuts) {
  const node = { routes: [], methods: [], directives: [] }

  if (typeof input === 'string') {
    node.forward = input

    return node
  }

  for (const [key, value] of Object.entries(input))
    switch (key) {
      case 'protected':
      case 'isolated':
      case 'forward':
        node[key] = value
        break
      default: {
        if (key[0] === '/') {
          node.routes.push({ path: key, node: parse(value, shortcuts) })
          continue
        }

        if (verbs.has(key)) {
          node.methods.push(parseMethod(key, value, shortcuts))
          continue
        }

        const directive = parseDirective(key, value, shortcuts)

        if (directive !== null) {
          node.directives.push(directive)
          continue
        }

        throw new Error(`RTD parse error: unknown key '${key}'`)
      }
    }

  return node
}

function parseMethod (verb, value, shortcuts) {
  const mapping = typeof value === 'string' ? { endpoint: value } : { ...value }

  if (mapping.endpoint !== undefined) {
    const [endpoint, component, namespace] = mapping.endpoint.split('.').reverse()

    if (component !== undefined) {
      mapping.component = component
      mapping.namespace = namespace ?? mapping.namespace ?? 'default'
      mapping.endpoint = endpoint
    }
  }

  const query = mapping.query

  if (query !== undefined && query !== null) {
    if (typeof query.limit === 'number') query.limit = { value: query.limit, range: [query.limit, query.limit] }
    if (typeof query.omit === 'number') query.omit = { value: query.omit, range: [query.omit, query.omit] }
  }

  const directives = []

  for (const [key, value] of Object.entries(mapping)) {
    const directive = parseDirective(key, value, shortcuts)

    if (directive === null) continue

    directives.push(directive)
    delete mapping[key]
  }

  return { verb, mapping, directives }
}

function parseDirective (key, value, shortcuts) {
  if (shortcuts?.has(key) === true) key = shortcuts.get(key)

  const match = key.match(DIRECTIVE_RX)

  if (match === null) return null

  const { family, name } = match.groups

  return { family, name, value }
}

// manifest.ts: a method's endpoint is one of the component's operations
function specify (node, manifest) {
  for (const route of node.routes) {
    for (const method of route.node.methods) specifyMethod(method, manifest)

    specify(route.node, manifest)
  }
}

function specifyMethod (method, manifest) {
  if (method.mapping?.endpoint === undefined) return

  const operation = manifest.operations?.[method.mapping.endpoint]

  assert.ok(operation !== undefined, `Operation '${method.mapping.endpoint}' not found`)

  if (method.mapping.query === undefined) method.mapping.query = operation.query === false ? null : {}

  method.mapping.namespace = manifest.namespace
  method.mapping.component = manifest.name
}
