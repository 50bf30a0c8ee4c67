'use strict'

// Stand-in for @toa.io/extensions.exposition, to the contract of
// extensions/exposition/source/deployment.ts (toa-io/toa, newest): one service, the gateway, on
// port 8000 with its readiness probe on 8004, an ingress at '/' whose hosts are the
// authorities' (class and annotations only where the annotation gives them, so that the
// context's `ingress` fills the gaps), and the identity components it runs inside.

const { readdirSync } = require('node:fs')
const { join } = require('node:path')
const assert = require('node:assert')

const PORT = 8000
const PROBE = 8004
const DELAY = 3

function deployment (instances, annotation) {
  assert.ok(annotation !== undefined, 'Exposition context annotation is required')

  const { authorities, class: cls, annotations, resources, service: own, debug, ...rest } = annotation
  const tree = { ...(rest['/'] ?? {}) }

  for (const instance of instances)
    tree['/' + instance.locator.namespace + '/' + instance.locator.name] = instance.manifest

  const hosts = authorities === undefined ? undefined : Object.values(authorities)

  const service = {
    group: 'exposition',
    name: 'gateway',
    version: require('./package.json').version,
    image: 'ghcr.io/toa-io/extension-exposition-gateway',
    port: PORT,
    ingress: { path: '/', hosts },
    probe: { path: '/.ready', port: PROBE, delay: DELAY },
    resources,
    annotations: own?.annotations,
    components: labels(),
    variables: [
      { name: 'TOA_EXPOSITION', value: JSON.stringify(tree) },
      { name: 'TOA_EXPOSITION_PROPERTIES', value: JSON.stringify({ authorities, debug }) },
      { name: 'TOA_TELEMETRY_READY', value: 'false' }
    ]
  }

  if (cls !== undefined) service.ingress.class = cls
  if (annotations !== undefined) service.ingress.annotations = annotations

  return { services: [service] }
}

// the extension's own components, loaded by Toa as components of the context
function components () {
  return { paths: folders().map((name) => join(ROOT, name)) }
}

function labels () {
  return folders().map((name) => name.replace('.', '-'))
}

const ROOT = join(__dirname, 'components')

function folders () {
  return readdirSync(ROOT).sort()
}

exports.deployment = deployment
exports.components = components
