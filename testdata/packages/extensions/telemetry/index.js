'use strict'

// Stand-in for @toa.io/extensions.telemetry, to the contract of
// extensions/telemetry/source/extension.ts (toa-io/toa): global logging variables, and the
// readiness probe every workload is asked on (port 8001), or no probe at all with
// `ready: false`.

const DEFAULT = { path: '/.ready', port: 8001, delay: 3 }

exports.deployment = function deployment (_, annotation) {
  const variables = { global: [] }
  const { level, ...components } = annotation?.logs ?? {}

  if (level !== undefined)
    variables.global.push({ name: 'TOA_TELEMETRY_LOGS', value: encode({ level }) })

  for (const [id, override] of Object.entries(components)) {
    const [namespace, name] = id.split('.')

    variables.global.push({
      name: `TOA_TELEMETRY_LOGS_${namespace.toUpperCase()}_${name.toUpperCase()}`,
      value: encode({ level, ...override })
    })
  }

  const ready = annotation?.ready

  if (ready === false) {
    variables.global.push({ name: 'TOA_TELEMETRY_READY', value: encode(false) })

    return { variables, probe: false }
  }

  const probe = { ...DEFAULT, ...(ready ?? {}) }

  variables.global.push({ name: 'TOA_TELEMETRY_READY', value: encode(probe) })

  return { variables, probe }
}

function encode (value) {
  return Buffer.from(JSON.stringify(value)).toString('base64')
}
