'use strict'

// Stand-in for @toa.io/extensions.storages, to the contract of
// extensions/storages/source/deployment.ts (toa-io/toa): a component's `storages` section lists
// the storages it uses by name, the annotation declares each; TOA_STORAGES and the secret
// references of the providers that have secrets are global; an `fs` storage with a `claim` is a
// volume mounted into the pods of every component that uses it.

const assert = require('node:assert')

const PREFIX = 'TOA_STORAGES'

const providers = {
  fs: { SECRETS: [] },
  tmp: { SECRETS: [] },
  s3: { SECRETS: [{ name: 'ACCESS_KEY_ID' }, { name: 'SECRET_ACCESS_KEY' }] },
  cloudinary: { SECRETS: [{ name: 'API_KEY' }, { name: 'API_SECRET', optional: true }] }
}

exports.deployment = function deployment (instances, annotation) {
  assert.ok(annotation !== undefined,
    `Storages annotation is required by: '${instances.map((i) => i.component.locator.id).join("', '")}'`)

  for (const instance of instances)
    for (const name of instance.manifest)
      assert.ok(name in annotation, `Missing '${name}' storage annotation declared in '${instance.component.locator.id}'`)

  const global = [{ name: PREFIX, value: encode(annotation) }]

  for (const [name, props] of Object.entries(annotation)) {
    const provider = providers[props.provider]

    assert.ok(provider !== undefined, `Unknown storage provider '${props.provider}'`)

    for (const secret of provider.SECRETS)
      global.push({
        name: `${PREFIX}_${name}_${secret.name}`.toUpperCase(),
        secret: { name: `toa-storages-${name}`, key: secret.name, optional: secret.optional }
      })
  }

  const mounts = {}

  for (const instance of instances)
    for (const name of instance.manifest) {
      const { provider, path, claim } = annotation[name]

      if (provider === 'fs' && claim !== undefined)
        (mounts[instance.locator.label] ??= []).push({ name, path, claim })
    }

  return { variables: { global }, mounts }
}

function encode (value) {
  return Buffer.from(JSON.stringify(value)).toString('base64')
}
