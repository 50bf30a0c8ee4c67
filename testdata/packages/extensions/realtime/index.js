'use strict'

// Stand-in for @toa.io/extensions.realtime, to the contract of extensions/realtime/source/
// extension.ts and Composition.ts (toa-io/toa, the newest, of the era of Toa 1.0.0-alpha.289):
// standalone, so deployed whenever the context annotates it; components() gives the streams
// component it runs, which Toa loads as the context's; one service, streams, with no port, no
// ingress and no probe of its own, its published image, the annotation's `resources`; the
// routes of the annotation and of the components' `realtime` sections as TOA_REALTIME (JSON); the
// events it consumes.

const { readdirSync } = require('node:fs')
const { resolve } = require('node:path')

const image = 'ghcr.io/toa-io/extension-realtime-streams'

exports.image = image
exports.standalone = true

exports.deployment = function deployment (instances, annotation) {
  const routes = []
  const { resources, ...annotatedRoutes } = annotation ?? {}

  routes.push(...parse(annotatedRoutes))

  for (const instance of instances) {
    const completed = {}

    for (const [key, value] of Object.entries(instance.manifest ?? {}))
      completed[instance.locator.id + '.' + key] = value

    routes.push(...parse(completed))
  }

  const service = {
    group: 'realtime',
    name: 'streams',
    image,
    version: require('./package.json').version,
    components: components().labels,
    resources,
    variables: [{ name: 'TOA_REALTIME', value: JSON.stringify(routes) }]
  }

  return { services: [service], events: routes.map((route) => route.event) }
}

function parse (declaration) {
  const routes = []

  for (const [event, value] of Object.entries(declaration))
    if (typeof value === 'object' && !Array.isArray(value)) {
      const properties = value.key === undefined ? [] : Array.isArray(value.key) ? value.key : [value.key]
      const route = { event, properties, expose: value.expose }

      if (value.dynamic !== undefined && value.dynamic !== false)
        route.dynamic = value.dynamic === true ? {} : { expose: value.dynamic.expose }

      routes.push(route)
    } else routes.push({ event, properties: Array.isArray(value) ? value : [value] })

  return routes
}

const ROOT = resolve(__dirname, 'components')

function components () {
  const entries = readdirSync(ROOT, { withFileTypes: true }).filter((entry) => entry.isDirectory())

  return { labels: entries.map((entry) => entry.name.replace('.', '-')), paths: entries.map((entry) => resolve(ROOT, entry.name)) }
}

exports.components = components
