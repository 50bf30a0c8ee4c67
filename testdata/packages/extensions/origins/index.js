'use strict'

// Stand-in for @toa.io/extensions.origins, to the contract of extensions/origins/source/
// extension.ts, annotation.ts and manifest.ts (toa-io/toa). A component's `origins` section names
// its origins, each a URI or `~` for one the context must give; the annotation, keyed by component
// id, gives or overrides them, and `.http` properties. Each component gets its origins' URIs and
// credentials through @toa.io/pointer under the id `origins-<label>`, and its properties as
// TOA_ORIGINS_<COMPONENT>__PROPERTIES: MessagePack in base64, as msgpackr's encode() writes it.
// (The newest origins toa-io/toa has is of the CommonJS era; no later one was found to say
// whether 289's wrote these properties as JSON, as its other packages do.)

const { createVariables } = require('@toa.io/pointer')

const ID_PREFIX = 'origins-'
const ENV_PREFIX = 'TOA_ORIGINS_'
const PROPERTIES_SUFFIX = '__PROPERTIES'
const NAME = /^[a-zA-Z0-9]{1,32}$/
const COMPONENT = /^[a-zA-Z0-9]{1,32}\.[a-zA-Z0-9]{1,32}$/
const PROTOCOLS = [
  { id: 'http', protocols: ['http:', 'https:'] },
  { id: 'amqp', protocols: ['amqp:', 'amqps:'] },
  { id: 'pubsub', protocols: ['pubsub:'] }
]

exports.manifest = function manifest (manifest) {
  if (manifest !== null) {
    if (typeof manifest !== 'object' || Array.isArray(manifest))
      throw new Error('Origins manifest must be an object of origins')

    for (const [name, value] of Object.entries(manifest)) {
      if (!NAME.test(name)) throw new Error(`Origin name '${name}' is not valid`)
      if (value !== null && typeof value !== 'string') throw new Error(`Origin '${name}' must be a URI or null`)
      if (value !== null) new URL(value) // eslint-disable-line no-new
    }
  }

  return manifest
}

exports.deployment = function deployment (instances, annotation = {}) {
  normalize(instances, annotation)

  const variables = {}

  for (const instance of instances) {
    const { origins, properties } = split(annotation[instance.locator.id])

    merge(variables, createInstanceVariables(instance, origins))
    merge(variables, createPropertiesVariable(instance.locator, properties))
  }

  return { variables }
}

function normalize (instances, annotation) {
  for (const key of Object.keys(annotation))
    if (!COMPONENT.test(key)) throw new Error(`Origins annotation key '${key}' is not a component id`)

  for (const instance of instances)
    annotation[instance.locator.id] = mergeInstance(annotation[instance.locator.id] ?? {}, instance)

  for (const component of Object.values(annotation)) {
    const { origins } = split(component)

    for (const urls of Object.values(origins)) checkURLs(Array.isArray(urls) ? urls : [urls])
  }
}

function mergeInstance (origins, instance) {
  if (instance.manifest === null || instance.manifest === undefined) return origins

  for (const [origin, value] of Object.entries(instance.manifest))
    if (origins[origin] === undefined)
      if (value === null) throw new Error(`Origin '${origin}' is not defined for '${instance.locator.id}'`)
      else origins[origin] = value

  return origins
}

function checkURLs (urls) {
  let id = null

  for (const url of urls) {
    const protocol = resolveProtocol(url)

    if (id === null) id = protocol.id
    else if (id !== protocol.id) throw new Error(`Origin has inconsistent protocols: ${id}, ${protocol.id}`)
  }
}

function resolveProtocol (reference) {
  const url = new URL(reference)

  for (const protocol of PROTOCOLS)
    if (protocol.protocols.includes(url.protocol)) return protocol

  throw new Error(`Protocol '${url.protocol}' is not supported.`)
}

function split (component) {
  const origins = {}
  const properties = {}

  for (const [key, value] of Object.entries(component))
    if (key[0] === '.') properties[key] = value
    else origins[key] = value

  return { origins, properties }
}

function createInstanceVariables (instance, origins) {
  if (instance.manifest === null || instance.manifest === undefined) return {}

  const label = instance.locator.label

  return createVariables(ID_PREFIX + label, origins, [{ group: label, selectors: Object.keys(instance.manifest) }])
}

function createPropertiesVariable (locator, properties) {
  const name = ENV_PREFIX + locator.uppercase + PROPERTIES_SUFFIX

  return { [locator.label]: [{ name, value: pack(properties).toString('base64') }] }
}

// @toa.io/generic's merge, for variables: lists of a key are appended
function merge (target, source) {
  for (const [key, list] of Object.entries(source)) (target[key] ??= []).push(...list)
}

// MessagePack of plain values, as msgpackr's encode() writes them without records
function pack (value) {
  const out = []

  write(value, out)

  return Buffer.from(out)
}

function write (value, out) {
  if (value === null || value === undefined) out.push(0xc0)
  else if (value === false) out.push(0xc2)
  else if (value === true) out.push(0xc3)
  else if (typeof value === 'number') number(value, out)
  else if (typeof value === 'string') string(value, out)
  else if (Array.isArray(value)) {
    header(value.length, out, 0x90, 0xdc, 0xdd)
    for (const item of value) write(item, out)
  } else {
    const keys = Object.keys(value)

    header(keys.length, out, 0x80, 0xde, 0xdf)

    for (const key of keys) {
      string(key, out)
      write(value[key], out)
    }
  }
}

function header (length, out, fix, short, long) {
  if (length < 0x10) out.push(fix | length)
  else if (length < 0x10000) out.push(short, length >> 8, length & 0xff)
  else out.push(long, ...bytes(length, 4))
}

function number (value, out) {
  if (value >>> 0 === value) {
    if (value < 0x80) out.push(value)
    else if (value < 0x100) out.push(0xcc, value)
    else if (value < 0x10000) out.push(0xcd, ...bytes(value, 2))
    else out.push(0xce, ...bytes(value, 4))
  } else if (value >> 0 === value) {
    if (value >= -0x20) out.push(value & 0xff)
    else if (value >= -0x80) out.push(0xd0, value & 0xff)
    else if (value >= -0x8000) out.push(0xd1, ...bytes(value & 0xffff, 2))
    else out.push(0xd2, ...bytes(value >>> 0, 4))
  } else {
    const buffer = Buffer.alloc(8)

    buffer.writeDoubleBE(value)
    out.push(0xcb, ...buffer)
  }
}

function string (value, out) {
  const data = Buffer.from(value, 'utf8')
  const length = data.length

  if (length < 0x20) out.push(0xa0 | length)
  else if (length < 0x100) out.push(0xd9, length)
  else if (length < 0x10000) out.push(0xda, ...bytes(length, 2))
  else out.push(0xdb, ...bytes(length, 4))

  out.push(...data)
}

function bytes (value, count) {
  const out = []

  for (let i = count - 1; i >= 0; i--) out.push(Math.floor(value / 2 ** (8 * i)) & 0xff)

  return out
}
