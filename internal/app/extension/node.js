'use strict'

// toa-deploy's bridge to a Toa application's extension and connector packages. toa-push starts it
// once per run with `node -e` and keeps it for the run: it writes one request per line, as JSON,
// on standard input, and reads one answer per line, as JSON, from file descriptor 3; standard
// output and standard error are the packages' own, for whatever they log. The process ends when
// its standard input does. It loads each package from the application's node_modules, as Toa's
// `definition(reference)` does, and calls what the package exports, with the values Toa passes:
//
//   {op: 'inspect', root, references: [{reference, annotation}]}
//     → {packages: [{reference, name, dir, version, exports, components: [path]}]}
//     `components(annotation)` is called where it is exported (Toa's extract()).
//   {op: 'manifests', root, components: [{id, manifest, extensions: [{reference, declaration}]}]}
//     → {components: [{id, extensions: [{reference, name, declaration}]}]}
//     Toa's norm, for each component it loads: every extension's `manifest(declaration,
//     manifest)`, where it exports one, turns the component's section into what the extension's
//     deployment() is handed as `instance.manifest` (storages makes `tmp` a list of one).
//   {op: 'deploy', root, annotations, components: {id: component}, dependencies: [{reference, instances: [id]}]}
//     → {dependencies: [{reference, name, dir, version, standalone, declaration}]}
//     Toa's resolve() and Factory: instances {locator, manifest, component}, `annotation()` where
//     the context annotates the package, the standalone packages among the annotations' keys,
//     then `deployment(instances, annotation)` of each.
//   {op: 'closure', root, dirs: [dir]} → {dirs: [dir]}
//     The folders of the packages given and of everything they depend on, as node resolves
//     them: what an answer of this run depends on, for toa-push's cache of the answers.
//
// A failure is {error: {reference, stage, message, component}}: stage 'missing' (not
// installed), 'load' (it cannot be loaded), 'manifest' (its manifest() threw, for the
// component named), 'call' (something else it exports threw) or 'output' (what it returned
// cannot be read). No dependencies: it runs with any node the application's packages run with.

const { createRequire } = require('node:module')
const { existsSync, readFileSync, realpathSync, writeSync } = require('node:fs')
const { dirname, isAbsolute, join, resolve } = require('node:path')
const { pathToFileURL } = require('node:url')
const { createInterface } = require('node:readline')

class Failure extends Error {
  constructor (reference, stage, message, component) {
    super(message)
    this.reference = reference
    this.stage = stage
    this.component = component
  }
}

const definitions = new Map()

async function main () {
  const lines = createInterface({ input: process.stdin, crlfDelay: Infinity })

  for await (const line of lines) {
    if (line === '') continue

    writeSync(3, await serve(JSON.parse(line)) + '\n')
  }
}

// Whether a package read a component's version while answering: toa-push's cache replays an
// answer given without it for a component whose code (so whose computed version) has changed.
let versionRead = false

// serve answers one request, as one line of JSON
async function serve (request) {
  versionRead = false
  watchVersions(request)

  const answer = JSON.stringify(await answerOf(request))

  // last, after everything the answer holds was read: toa-push looks for it at the end of the line
  return answer.slice(0, -1) + `,"versionRead":${versionRead}}`
}

async function answerOf (request) {
  const req = createRequire(join(request.root, 'package.json'))

  try {
    switch (request.op) {
      case 'inspect': return await inspect(req, request)
      case 'manifests': return await manifests(req, request)
      case 'deploy': return await deploy(req, request)
      case 'closure': return closure(request)
      default: throw new Error(`unknown request '${request.op}'`)
    }
  } catch (error) {
    if (!(error instanceof Failure)) throw error

    return { error: { reference: error.reference, stage: error.stage, message: error.message, component: error.component } }
  }
}

// the components' manifests get a `version` that notes when it is read (JSON.stringify, spread
// and structuredClone read it too); writing it counts as reading
function watchVersions (request) {
  let components = []

  if (request.op === 'manifests') components = (request.components ?? []).map((c) => c.manifest)
  else if (request.op === 'deploy') components = Object.values(request.components ?? {})

  for (const manifest of components) {
    if (manifest === null || typeof manifest !== 'object' || !('version' in manifest)) continue

    let value = manifest.version

    Object.defineProperty(manifest, 'version', {
      enumerable: true,
      configurable: true,
      get () {
        versionRead = true
        return value
      },
      set (v) {
        versionRead = true
        value = v
      }
    })
  }
}

async function inspect (req, { references }) {
  const packages = []

  for (const { reference, annotation } of references) {
    const definition = await define(req, reference)
    const entry = describe(definition)

    if (typeof definition.module.components === 'function') {
      const answer = call(reference, 'components()', () => definition.module.components(annotation))

      entry.components = paths(reference, definition.dir, answer)
    }

    packages.push(entry)
  }

  return { packages }
}

// Toa's extensions(manifest) of runtime/norm/src/.component/extensions.js: each extension's
// manifest() hook, in the component's order, the predefined ones first
async function manifests (req, request) {
  const components = []

  for (const { id, manifest, extensions } of request.components) {
    const out = []

    for (const { reference, declaration } of extensions) {
      let definition

      try {
        definition = await define(req, reference)
      } catch (error) {
        if (error instanceof Failure) error.component = id

        throw error
      }

      let value = declaration

      if (typeof definition.module.manifest === 'function') {
        try {
          value = definition.module.manifest(declaration, manifest)
        } catch (error) {
          throw new Failure(reference, 'manifest', `manifest() threw: ${first(error)}`, id)
        }

        if (value === undefined)
          throw new Failure(reference, 'manifest', `Extension '${reference}' hasn't returned manifest`, id)
      }

      out.push({ reference, name: definition.name, declaration: plain(reference, value, 'manifest()') })
    }

    components.push({ id, extensions: out })
  }

  return { components }
}

async function deploy (req, request) {
  const annotations = request.annotations ?? {}
  const components = request.components ?? {}
  const dependencies = []

  for (const { reference, instances: ids } of request.dependencies) {
    const definition = await define(req, reference)
    const instances = ids.map((id) => {
      const component = components[id]

      return { locator: component.locator, manifest: component.extensions?.[definition.name], component }
    })

    const annotation = annotations[definition.name]

    if (annotation !== undefined && typeof definition.module.annotation === 'function')
      annotations[definition.name] = call(reference, 'annotation()', () => definition.module.annotation(annotation, instances))

    dependencies.push({ definition, instances, standalone: false })
  }

  const references = new Set(request.dependencies.map((dependency) => dependency.reference))

  for (const key of Object.keys(annotations)) {
    if (references.has(key)) continue

    let definition

    // an annotation of what cannot be loaded is not a dependency (Toa's optional())
    try {
      definition = await define(req, key)
    } catch {
      continue
    }

    if (definition.module.standalone === true) dependencies.push({ definition, instances: [], standalone: true })
  }

  const out = []

  for (const { definition, instances, standalone } of dependencies) {
    const entry = { ...describe(definition), standalone, declaration: null }
    const { module, reference, name } = definition

    if (typeof module.deployment === 'function') {
      const declaration = call(reference, 'deployment()', () => module.deployment(instances, annotations[name]))

      entry.declaration = normalize(reference, declaration)
    }

    out.push(entry)
  }

  return { dependencies: out }
}

// the packages' folders and those of everything they depend on, transitively
function closure ({ dirs }) {
  const seen = new Set()
  const queue = dirs.map((dir) => realpathSync(dir))

  while (queue.length > 0) {
    const dir = queue.shift()

    if (seen.has(dir)) continue

    seen.add(dir)

    let pkg

    try {
      pkg = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8'))
    } catch {
      continue
    }

    const req = createRequire(join(dir, 'package.json'))
    const names = { ...pkg.dependencies, ...pkg.optionalDependencies, ...pkg.peerDependencies }

    for (const name of Object.keys(names)) {
      const file = find(req, name)

      if (file !== null) queue.push(realpathSync(dirname(file)))
    }
  }

  return { dirs: [...seen].sort() }
}

// what Toa's definition(reference) finds: the package's name and module, from the context
async function define (req, reference) {
  const file = locate(req, reference)

  if (definitions.has(file)) return { ...definitions.get(file), reference }

  const dir = dirname(file)
  let pkg

  try {
    pkg = JSON.parse(readFileSync(file, 'utf8'))
  } catch (error) {
    throw new Failure(reference, 'load', `${file} cannot be read: ${error.message}`)
  }

  let module

  try {
    module = await load(req, reference, dir, pkg)
  } catch (error) {
    throw new Failure(reference, 'load', `cannot be loaded: ${first(error)}`)
  }

  const definition = { reference, name: pkg.name ?? reference, version: pkg.version, dir, module }

  definitions.set(file, definition)

  return definition
}

function locate (req, reference) {
  const file = find(req, reference)

  if (file === null) throw new Failure(reference, 'missing', `cannot find ${reference}/package.json`)

  return file
}

// a package's package.json, or null; one whose `exports` leaves its package.json out is found
// where node would find it
function find (req, name) {
  try {
    return req.resolve(join(name, 'package.json'))
  } catch (error) {
    if (error.code !== 'ERR_PACKAGE_PATH_NOT_EXPORTED' && error.code !== 'MODULE_NOT_FOUND') throw error
  }

  for (const dir of req.resolve.paths(name) ?? []) {
    const file = join(dir, name, 'package.json')

    if (existsSync(file)) return file
  }

  return null
}

async function load (req, reference, dir, pkg) {
  const specifier = isAbsolute(reference) ? dir : reference

  try {
    return req(specifier)
  } catch (error) {
    if (error.code !== 'ERR_REQUIRE_ESM' && error.code !== 'ERR_PACKAGE_PATH_NOT_EXPORTED') throw error
  }

  const namespace = await import(pathToFileURL(join(dir, entry(pkg))).href)

  return namespace.deployment === undefined && namespace.default !== undefined ? namespace.default : namespace
}

// an ES module's entry, as `import` would choose it
function entry (pkg) {
  let exported = pkg.exports

  if (exported !== null && typeof exported === 'object' && '.' in exported) exported = exported['.']
  if (exported !== null && typeof exported === 'object') exported = exported.import ?? exported.node ?? exported.default

  return typeof exported === 'string' ? exported : (pkg.module ?? pkg.main ?? 'index.js')
}

function describe ({ reference, name, version, dir, module }) {
  const exports = {}

  for (const key of ['deployment', 'annotation', 'components', 'manifest']) exports[key] = typeof module[key] === 'function'

  exports.standalone = module.standalone === true

  return { reference, name, version, dir, exports }
}

function call (reference, what, fn) {
  try {
    return fn()
  } catch (error) {
    throw new Failure(reference, 'call', `${what} threw: ${first(error)}`)
  }
}

// components() answers `{paths}` (newer), or the paths themselves
function paths (reference, dir, answer) {
  const list = Array.isArray(answer) ? answer : answer?.paths

  if (!Array.isArray(list) || list.some((path) => typeof path !== 'string'))
    throw new Failure(reference, 'output', 'components() returned no list of paths' +
      (answer?.manifests !== undefined ? ' (manifests without paths are not supported)' : ''))

  return list.map((path) => resolve(dir, path))
}

// Keeps what toa-deploy reads, in the order JavaScript gives it: `variables` and `mounts` are
// objects whose key order is the merge order, so they become lists of [key, items] pairs.
function normalize (reference, declaration) {
  if (declaration === undefined || declaration === null) return {}
  if (typeof declaration.then === 'function')
    throw new Failure(reference, 'output', 'deployment() returned a promise: Toa calls it synchronously')
  if (typeof declaration !== 'object' || Array.isArray(declaration))
    throw new Failure(reference, 'output', `deployment() returned ${kind(declaration)}, not an object`)

  const out = {}

  for (const key of ['variables', 'mounts']) {
    const value = declaration[key]

    if (value === undefined) continue
    if (value === null || typeof value !== 'object' || Array.isArray(value))
      throw new Failure(reference, 'output', `deployment() returned '${key}' as ${kind(value)}, not an object of lists`)

    out[key] = Object.entries(value)
  }

  for (const key of ['services', 'probe', 'events', 'references', 'proxies']) if (declaration[key] !== undefined) out[key] = declaration[key]

  return plain(reference, out, 'deployment()')
}

function plain (reference, value, what) {
  if (value === undefined) return null

  try {
    return JSON.parse(JSON.stringify(value))
  } catch (error) {
    throw new Failure(reference, 'output', `${what} returned what cannot be written as JSON: ${error.message}`)
  }
}

function kind (value) {
  if (value === null) return 'null'
  if (Array.isArray(value)) return 'a list'

  return 'a ' + typeof value
}

function first (error) {
  const message = String(error?.message ?? error).split('\n')[0]

  return error?.name !== undefined && error.name !== 'Error' ? `${error.name}: ${message}` : message
}

main().catch((error) => {
  console.error(error)
  process.exitCode = 1
})
