'use strict'

// Stand-in for @toa.io/extensions.realtime, to the contract of
// extensions/realtime/source/extension.ts (toa-io/toa): standalone, so deployed whenever the
// context annotates it; one service, streams, with no port, no ingress and no probe of its own;
// the routes of the annotation and of the components' `realtime` sections as TOA_REALTIME; the
// events it consumes.

exports.standalone = true

exports.deployment = function deployment (instances, annotation) {
  const { resources, ...annotated } = annotation ?? {}
  const routes = parse(annotated)

  for (const instance of instances) {
    const completed = {}

    for (const [key, value] of Object.entries(instance.manifest ?? {}))
      completed[instance.locator.id + '.' + key] = value

    routes.push(...parse(completed))
  }

  const service = {
    group: 'realtime',
    name: 'streams',
    version: require('./package.json').version,
    image: 'ghcr.io/toa-io/extension-realtime-streams',
    components: ['realtime-streams'],
    resources,
    variables: [{ name: 'TOA_REALTIME', value: JSON.stringify(routes) }]
  }

  return { services: [service], events: routes.map((route) => route.event) }
}

function parse (declaration) {
  return Object.entries(declaration).map(([event, value]) =>
    ({ event, properties: Array.isArray(value) ? value : [value] }))
}
