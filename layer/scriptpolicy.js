'use strict'
// toa-push runs this file with the runner's node, in the folder where the runner's npm installed
// with --ignore-scripts for a platform it cannot run scripts for, to learn which packages' install
// scripts that npm would have run: npm's own code decides (npm 11's allowScripts). argv: the
// runner npm's package folder, npm's cache folder, the staging folder the project was copied
// under (taken off local packages' paths, which the policy matches as `file:/path`), then the
// JSON list of the packages' locations ("node_modules/x"). It writes to stdout:
//
//   { source: where the policy came from (null: none), dangerous: --dangerously-allow-all-scripts,
//     strict: --strict-allow-scripts, verdicts: { location: true | false | null } }
//
// true: allowed, false: denied (npm skips its scripts), null: not covered (npm runs its scripts
// and warns, or refuses the install with strict-allow-scripts). npm's own warnings (an entry it
// ignores, a policy source it overrides) go to stderr, as npm prints them.
const path = require('path')

const [npmRoot, cache, staging, list] = process.argv.slice(2)
const locations = JSON.parse(list)

async function main () {
  // npm as `npm ci` in this folder would load: its config from the command line (none but where
  // its cache and logs go), the environment and the .npmrc files
  process.argv = [process.argv[0], path.join(npmRoot, 'bin', 'npm-cli.js'), 'ci', `--cache=${cache}`,
    '--logs-max=0', '--no-update-notifier', '--loglevel=warn']
  const Npm = require(path.join(npmRoot, 'lib', 'npm.js'))
  const resolveAllowScripts = require(path.join(npmRoot, 'lib', 'utils', 'resolve-allow-scripts.js'))
  const { isScriptAllowed } = require(path.join(npmRoot, 'node_modules', '@npmcli', 'arborist', 'lib', 'script-allowed.js'))
  const Arborist = require(path.join(npmRoot, 'node_modules', '@npmcli', 'arborist'))
  const npm = new Npm()
  await npm.load()
  const { policy, source } = await resolveAllowScripts(npm)
  const arb = new Arborist({ ...npm.flatOptions, path: npm.prefix, allowScripts: policy })
  const tree = await arb.loadActual()
  const verdicts = {}
  for (const location of locations) {
    const node = tree.inventory.get(location)
    if (node && staging && typeof node.resolved === 'string' && node.resolved.startsWith(`file:${staging}/`)) {
      node.resolved = 'file:' + node.resolved.slice(`file:${staging}`.length)
    }
    verdicts[location] = node ? isScriptAllowed(node, policy) : null
  }
  process.stdout.write(JSON.stringify({
    source,
    dangerous: !!npm.flatOptions.dangerouslyAllowAllScripts,
    strict: !!npm.flatOptions.strictAllowScripts,
    verdicts,
  }) + '\n')
}

main().then(() => process.exit(0), er => {
  process.stderr.write(`toa-push: ${er.message}\n`)
  process.exit(1)
})
