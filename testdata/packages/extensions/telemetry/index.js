'use strict'

// Stand-in for @toa.io/extensions.telemetry, to the contract of extensions/telemetry/source/
// extension.ts and Ready.ts (toa-io/toa) in the era of Toa 1.0.0-alpha.289, when its values are
// JSON (1.0.0-alpha.110 wrote base64) and the readiness probe has no delay: global logging and
// tracing variables; TOA_TELEMETRY_READY, the probe the runtime opens; and the readiness probe
// every workload is asked on (8001), or none with `ready: false`.

const assert = require('node:assert')

const LOGS_PREFIX = 'TOA_TELEMETRY_LOGS'
const TRACES_ENV = 'TOA_TELEMETRY_TRACES'
const READY_ENV = 'TOA_TELEMETRY_READY'
const DEFAULT_ANNOTATION = { path: '/.ready', port: 8001 }

exports.deployment = function deployment (_, annotation) {
  const variables = { global: [] }

  if (annotation?.logs !== undefined) addLogsVariables(annotation.logs, variables)
  if (annotation?.traces !== undefined) addTracesVariables(annotation.traces, variables)

  const ready = normalizeAnnotation(annotation?.ready)

  if (ready === false) {
    variables.global.push({ name: READY_ENV, value: JSON.stringify(false) })

    return { variables, probe: false }
  }

  variables.global.push({ name: READY_ENV, value: JSON.stringify(ready) })

  const probe = { path: ready.path ?? DEFAULT_ANNOTATION.path, port: ready.port ?? DEFAULT_ANNOTATION.port }

  return { variables, probe }
}

function normalizeAnnotation (ready) {
  if (ready === false) return false
  if (ready === undefined) return { enabled: true, ...DEFAULT_ANNOTATION }

  return { enabled: true, path: ready.path ?? DEFAULT_ANNOTATION.path, port: ready.port ?? DEFAULT_ANNOTATION.port }
}

function addLogsVariables (annotation, variables) {
  const { level, ...components } = annotation
  const global = { level }

  if (level !== undefined) variables.global.push({ name: LOGS_PREFIX, value: JSON.stringify(global) })

  for (const [id, override] of Object.entries(components)) {
    const [namespace, name] = id.split('.')

    variables.global.push({
      name: `${LOGS_PREFIX}_${namespace.toUpperCase()}_${name.toUpperCase()}`,
      value: JSON.stringify(Object.assign({}, global, override))
    })
  }
}

function addTracesVariables (annotation, variables) {
  const { sample, rate, exporters } = annotation

  if (sample !== undefined)
    assert.ok(typeof sample === 'number' && sample >= 0 && sample <= 1, 'telemetry.traces.sample must be a number within [0, 1]')

  if (rate !== undefined)
    assert.ok(typeof rate === 'number' && rate > 0, 'telemetry.traces.rate must be a positive number')

  if (exporters?.otlp !== undefined)
    assert.ok(typeof exporters.otlp.endpoint === 'string', 'telemetry.traces.exporters.otlp.endpoint is required')

  variables.global.push({ name: TRACES_ENV, value: JSON.stringify({ sample, rate, exporters }) })
}
