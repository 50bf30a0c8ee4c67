'use strict'
// toa-push runs this file with the base's own node, inside the base (package sandbox), to run the
// install scripts of the packages the runner's npm installed with --ignore-scripts: what
// `npm rebuild <packages>` would run (@npmcli/arborist's rebuild), through the base npm's own
// @npmcli/run-script, without starting the npm CLI, whose start and tree loading are most of the
// time under QEMU. argv[2] is the plan toa-push wrote:
//
//   { npm: the base npm's package folder, prefix: the install's folder, command: npm_command,
//     jobs: how many packages at once,
//     packages: [{ location: "node_modules/x", after: [indexes of packages it depends on] }] }
//
// in arborist's order (depth, then path). A package's preinstall, install and postinstall run in
// that order, once the packages it depends on are done; packages that do not depend on each other
// run at once. A package with a binding.gyp and no install or preinstall script gets
// `node-gyp rebuild` as its install, as npm gives it. The environment is npm's for a lifecycle
// script: the npm CLI's own (npm_execpath, npm_node_execpath, npm_config_local_prefix...),
// arborist's (npm_package_resolved, _integrity, _optional, _dev, _peer, _dev_optional, _json)
// and run-script's (npm_package_name, _version, _config_*, _engines_*, _bin_*,
// npm_lifecycle_event, npm_lifecycle_script, npm_config_node_gyp, node-gyp-bin and every
// node_modules/.bin up the tree on PATH).
const fs = require('fs')
const path = require('path')
const { createRequire } = require('module')

const plan = JSON.parse(fs.readFileSync(process.argv[2], 'utf8'))
const fromRunScript = createRequire(path.join(plan.npm, 'node_modules', '@npmcli', 'run-script', 'package.json'))
const runScriptPkg = fromRunScript('./lib/run-script-pkg.js')
const { isNodeGypPackage, defaultGypInstallScript } = fromRunScript('@npmcli/node-gyp')

const boolEnv = b => b ? '1' : ''
const readJSON = file => JSON.parse(fs.readFileSync(file, 'utf8'))

// what the npm CLI puts in its own environment before it runs a script (@npmcli/config's
// set-envs: the configs whose value is not their definition's default, which for npm run with no
// configuration of its own are these computed ones; npm.js; the user-agent definition)
const npmVersion = readJSON(path.join(plan.npm, 'package.json')).version
const home = process.env.HOME || require('os').homedir()
const globalPrefix = process.env.PREFIX || path.dirname(path.dirname(process.execPath))
const computed = {
  npm_config_globalconfig: path.join(globalPrefix, 'etc', 'npmrc'),
  npm_config_init_module: path.join(home, '.npm-init.js'),
  npm_config_noproxy: process.env.NO_PROXY || process.env.no_proxy || '',
  npm_config_npm_version: npmVersion,
  npm_config_prefix: globalPrefix,
  npm_config_userconfig: path.join(home, '.npmrc'),
}
for (const [key, value] of Object.entries(computed)) {
  if (process.env[key] === undefined) { // set in the environment: npm leaves it
    process.env[key] = value
  }
}
Object.assign(process.env, {
  INIT_CWD: plan.prefix,
  HOME: home,
  COLOR: '0',
  EDITOR: process.env.EDITOR || process.env.VISUAL || 'vi',
  npm_command: plan.command,
  npm_config_global_prefix: globalPrefix,
  npm_config_local_prefix: plan.prefix,
  npm_config_user_agent: `npm/${npmVersion} node/${process.version} ${process.platform} ${process.arch} workspaces/false`,
  npm_execpath: path.join(plan.npm, 'bin', 'npm-cli.js'),
  NODE: process.execPath,
  npm_node_execpath: process.execPath,
})

// the hidden lockfile npm wrote on the runner: where arborist reads resolved, integrity and the
// dev/optional/peer flags of the installed tree
let meta = {}
try {
  meta = readJSON(path.join(plan.prefix, 'node_modules', '.package-lock.json')).packages || {}
} catch {}

const write = s => process.stdout.write(s.endsWith('\n') ? s : s + '\n')

async function runPackage ({ location }) {
  const dir = path.join(plan.prefix, location)
  const pkg = readJSON(path.join(dir, 'package.json'))
  pkg._id = `${pkg.name}@${pkg.version}`
  const scripts = pkg.scripts || {}
  if (!scripts.install && !scripts.preinstall && pkg.gypfile !== false && await isNodeGypPackage(dir)) {
    scripts.install = defaultGypInstallScript
  }
  pkg.scripts = scripts
  const m = meta[location] || {}
  const env = {
    // an arborist node's resolved and integrity are null when not known: "null" in the env
    npm_package_resolved: m.resolved ?? null,
    npm_package_integrity: m.integrity ?? null,
    npm_package_json: path.join(dir, 'package.json'),
    npm_package_optional: boolEnv(m.optional),
    npm_package_dev: boolEnv(m.dev),
    npm_package_peer: boolEnv(m.peer),
    npm_package_dev_optional: boolEnv(m.devOptional && !m.dev && !m.optional),
  }
  for (const event of ['preinstall', 'install', 'postinstall']) {
    if (!scripts[event]) {
      continue
    }
    const banner = `> ${pkg._id} ${event} (${location})\n> ${scripts[event]}`
    let result
    try {
      result = await runScriptPkg({ event, path: dir, pkg, env, stdio: 'pipe', stdioString: true })
    } catch (er) {
      write(banner)
      for (const out of [er.stdout, er.stderr]) {
        if (out) {
          write(out)
        }
      }
      const how = er.signal ? `signal ${er.signal}` : `exit status ${er.code}`
      // node-gyp's build needs tools the base may not have: say where they come from
      const gyp = scripts[event] === defaultGypInstallScript || /node-gyp/.test(scripts[event])
      const hint = gyp
        ? '; node-gyp builds it with python3, make and a C++ compiler in the base: a build.run line installs them ' +
          '(apk add python3 make g++ on Alpine, apt-get update && apt-get install -y python3 make g++ on Debian), ' +
          'or registry.build.image names a base that has them'
        : ''
      throw new Error(`${pkg._id} (${location}): its ${event} script failed: ${how}${hint}`)
    }
    write(banner)
    for (const out of [result.stdout, result.stderr]) {
      if (out) {
        write(out)
      }
    }
  }
}

// each package once the packages it depends on are done, at most plan.jobs at once; the first
// failure stops what has not started
async function main () {
  const done = plan.packages.map(() => null)
  let running = 0
  const waiting = []
  // a slot freed is handed to the next waiting package, so that never more than plan.jobs run
  const slot = () => running < plan.jobs
    ? (running++, Promise.resolve())
    : new Promise(resolve => waiting.push(resolve))
  const release = () => {
    const next = waiting.shift()
    if (next) {
      next()
    } else {
      running--
    }
  }
  const start = i => {
    if (!done[i]) {
      done[i] = Promise.all(plan.packages[i].after.map(start)).then(async () => {
        await slot()
        try {
          await runPackage(plan.packages[i])
        } finally {
          release()
        }
      })
    }
    return done[i]
  }
  await Promise.all(plan.packages.map((_, i) => start(i)))
}

// the failure on the stream the scripts' output went to, after that output (a pipe, which Node
// writes at once on Linux): the last line of what toa-push shows; stdout and stderr are two
// pipes, read apart, in no common order
main().catch(er => {
  process.stdout.write(`toa-push: ${er.message}\n`)
  process.exit(1)
})
