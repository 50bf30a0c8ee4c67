'use strict'

// Stand-in for @toa.io/extensions.storages, to the contract of extensions/storages/source/
// manifest.ts and deployment.ts (toa-io/toa), in the era of Toa 1.0.0-alpha.289 (JSON values, and
// volume mounts for a file-system storage with a claim, as its transpiled deployment.js has
// them; 1.0.0-alpha.110 wrote base64 and mounted nothing). A component's `storages` section names
// the storages it uses: manifest() makes `tmp` a list of one and `~` none. The annotation declares
// each storage with its provider: TOA_STORAGES is the annotation, and the secrets a provider
// needs (providers/*.ts, static SECRETS) are references to the Secret toa-storages-<name>.

const assert = require('node:assert')

const ENV_PREFIX = 'TOA_STORAGES'

const providers = {
  s3: { SECRETS: [{ name: 'ACCESS_KEY_ID', optional: true }, { name: 'SECRET_ACCESS_KEY', optional: true }] },
  cloudinary: { SECRETS: [{ name: 'API_KEY' }, { name: 'API_SECRET' }] },
  fs: {},
  tmp: {},
  test: { SECRETS: [{ name: 'USERNAME' }, { name: 'PASSWORD' }] }
}

exports.manifest = function manifest (manifest) {
  if (manifest === null) return []
  if (typeof manifest === 'string') return [manifest]

  return manifest
}

exports.deployment = function deployment (instances, annotation) {
  validate(instances, annotation)

  const pointer = { name: ENV_PREFIX, value: JSON.stringify(annotation) }
  const dependency = { variables: { global: [pointer, ...getSecrets(annotation)] } }
  const mounts = getMounts(instances, annotation)

  if (mounts !== null) dependency.mounts = mounts

  return dependency
}

function validate (instances, annotation) {
  assert.ok(annotation !== undefined,
    `Storages annotation is required by: '${instances.map((i) => i.component.locator.id).join("', '")}'`)

  for (const { provider } of Object.values(annotation))
    assert.ok(typeof provider === 'string' && provider in providers, `Unknown storage provider '${provider}'`)

  for (const instance of instances) {
    instance.manifest ??= []

    for (const name of instance.manifest)
      assert.ok(name in annotation, `Missing '${name}' storage annotation declared in '${instance.component.locator.id}'`)
  }
}

function getSecrets (annotation) {
  const secrets = []

  for (const [name, declaration] of Object.entries(annotation))
    for (const secret of providers[declaration.provider].SECRETS ?? [])
      secrets.push({
        name: `${ENV_PREFIX}_${name}_${secret.name}`.toUpperCase(),
        secret: { name: `toa-storages-${name}`, key: secret.name, optional: secret.optional }
      })

  return secrets
}

function getMounts (instances, annotation) {
  let mounts = null

  for (const { locator, manifest } of instances)
    for (const name of manifest) {
      const declaration = annotation[name]

      if (declaration.provider !== 'fs' || declaration.claim === undefined) continue

      mounts ??= {}
      ;(mounts[locator.label] ??= []).push({ name, path: declaration.path, claim: declaration.claim })
    }

  return mounts
}
