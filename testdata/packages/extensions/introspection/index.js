'use strict'

// Stand-in for @toa.io/extensions.introspection (toa-io/toa, after 289): standalone; one
// service, explorer, whose UI listens on 8002 at /.introspection, an ingress path that asks
// the context's `ingress` for its hosts; `introspection: false` deploys nothing.

exports.standalone = true

exports.deployment = function deployment (_, annotation) {
  if (annotation === false) return {}

  const service = {
    group: 'introspection',
    name: 'explorer',
    version: require('./package.json').version,
    image: 'ghcr.io/toa-io/extension-introspection-explorer',
    port: 8002,
    ingress: { path: '/.introspection' },
    components: [],
    variables: [{ name: 'TOA_INTROSPECTION', value: JSON.stringify(annotation ?? {}) }]
  }

  return { services: [service] }
}
