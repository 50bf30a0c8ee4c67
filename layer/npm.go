package layer

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/toa-deploy/toa-deploy/internal/fsys"
)

// Toolchain is what runs the install on the runner. Its versions are inputs of the dependencies
// hash: another npm may install another tree.
type Toolchain struct {
	Node string // "20.20.2"
	Npm  string // "11.19.1"
}

// DetectToolchain asks the runner's node and npm for their versions.
func DetectToolchain(ctx context.Context) (Toolchain, error) {
	node, err := version(ctx, "node")
	if err != nil {
		return Toolchain{}, err
	}
	npm, err := npmVersion(ctx)
	if err != nil {
		return Toolchain{}, err
	}
	return Toolchain{Node: strings.TrimPrefix(node, "v"), Npm: npm}, nil
}

// npmVersion reads the version of the npm on PATH from its package.json, beside the
// bin/npm-cli.js its command links to: starting npm to ask costs about a second, and a short push
// should not. It asks npm when the layout is not npm's usual one.
func npmVersion(ctx context.Context) (string, error) {
	if v := installedNpmVersion(); v != "" {
		return v, nil
	}
	return version(ctx, "npm")
}

func installedNpmVersion() string {
	path, err := exec.LookPath("npm")
	if err != nil {
		return ""
	}
	cli, err := filepath.EvalSymlinks(path)
	if err != nil || filepath.Base(cli) != "npm-cli.js" {
		return ""
	}
	data, err := os.ReadFile(filepath.Join(filepath.Dir(cli), "..", "package.json"))
	if err != nil {
		return ""
	}
	var pkg struct {
		Name    string `json:"name"`
		Version string `json:"version"`
	}
	if json.Unmarshal(data, &pkg) != nil || pkg.Name != "npm" {
		return ""
	}
	return pkg.Version
}

func version(ctx context.Context, tool string) (string, error) {
	path, err := exec.LookPath(tool)
	if err != nil {
		return "", fmt.Errorf("%s is not on PATH: toa-push installs the dependencies with the runner's node and npm; install Node.js", tool)
	}
	out, err := exec.CommandContext(ctx, path, "--version").Output()
	if err != nil {
		return "", fmt.Errorf("run %s --version: %w", tool, err)
	}
	return strings.TrimSpace(string(out)), nil
}

// Runner is the machine npm runs on, as node sees it: what an install's flags, its cache key and
// the native-code checks depend on. DetectRunner asks once; WithRunner hands the answer to every
// install of a run.
type Runner struct {
	Toolchain
	OS       string // process.platform: "linux"
	CPU      string // process.arch: "x64"
	Libc     string // "glibc", "musl", or "" off linux
	Modules  string // process.versions.modules: the ABI of native addons
	ExecPath string // node's own path
}

// DetectRunner asks the runner's node what it is, and its npm for its version.
func DetectRunner(ctx context.Context) (*Runner, error) {
	tools, err := DetectToolchain(ctx)
	if err != nil {
		return nil, err
	}
	node, _ := exec.LookPath("node")
	const script = `if (process.report.excludeNetwork !== undefined) process.report.excludeNetwork = true
const r = process.report.getReport(), h = r.header || {}
let libc = ''
if (process.platform === 'linux') libc = h.glibcVersionRuntime ? 'glibc' : (r.sharedObjects || []).some(f => /ld-musl-|libc\.musl-/.test(f)) ? 'musl' : ''
console.log(JSON.stringify({os: process.platform, cpu: process.arch, libc, modules: process.versions.modules, execPath: process.execPath}))`
	out, err := exec.CommandContext(ctx, node, "-e", script).Output()
	if err != nil {
		return nil, fmt.Errorf("ask node for its platform: %w", err)
	}
	var v struct{ OS, CPU, Libc, Modules, ExecPath string }
	if err := json.Unmarshal(out, &v); err != nil {
		return nil, fmt.Errorf("ask node for its platform: %w", err)
	}
	return &Runner{Toolchain: tools, OS: v.OS, CPU: v.CPU, Libc: v.Libc, Modules: v.Modules, ExecPath: v.ExecPath}, nil
}

// String spells the runner as "linux/x64 glibc, Node 20.20.2".
func (r *Runner) String() string {
	s := r.OS + "/" + r.CPU
	if r.Libc != "" {
		s += " " + r.Libc
	}
	return s + ", Node " + r.Node
}

// runner is WithRunner's runner, else the one DetectRunner finds now, with WithToolchain's
// versions where it gives them.
func (o *options) runner(ctx context.Context) (*Runner, error) {
	r := o.runnerGiven
	if r == nil {
		var err error
		if r, err = DetectRunner(ctx); err != nil {
			return nil, err
		}
	}
	if o.toolchain != nil {
		copied := *r
		copied.Toolchain = *o.toolchain
		return &copied, nil
	}
	return r, nil
}

// major is the major of a Node version: "v24.14.0" → "24".
func major(version string) string {
	v := strings.TrimPrefix(strings.TrimSpace(version), "v")
	if i := strings.IndexByte(v, '.'); i >= 0 {
		v = v[:i]
	}
	return v
}

// nodeABI are the NODE_MODULE_VERSION of Node's majors, which abi<N> prebuilds are tagged with.
var nodeABI = map[string]string{"16": "93", "17": "102", "18": "108", "19": "111", "20": "115",
	"21": "120", "22": "127", "23": "131", "24": "137", "25": "141"}

// install is one npm run that installs packages for a platform.
type install struct {
	platform Platform
	cpu      string
	runner   *Runner
	// foreign is true when the target's os, cpu or libc is not the runner's: install scripts are
	// skipped, and packages that build native code refused.
	foreign bool
	// otherNode is true when the base's Node major is not the runner's: the same, for native
	// code built for the wrong ABI and scripts run by the wrong Node.
	otherNode bool
	baseNode  string // the base's Node version, or the runner's
	// scriptsOnRunner: npm runs the install scripts of a native target on the runner
	// (WithScriptsOnRunner); otherwise never
	scriptsOnRunner bool
}

func (o *options) newInstall(ctx context.Context, p Platform) (*install, error) {
	cpu, err := p.npm()
	if err != nil {
		return nil, err
	}
	r, err := o.runner(ctx)
	if err != nil {
		return nil, err
	}
	in := &install{platform: p, cpu: cpu, runner: r, baseNode: r.Node, scriptsOnRunner: o.scriptsOnRunner}
	in.foreign = r.OS != p.OS || r.CPU != cpu || r.Libc != p.Libc
	if o.baseNode != "" {
		in.baseNode = strings.TrimPrefix(o.baseNode, "v")
		in.otherNode = major(o.baseNode) != major(r.Node)
	}
	return in, nil
}

// skipScripts is true when npm runs with --ignore-scripts: always, but for a native target with
// WithScriptsOnRunner. The scripts npm skips run in the base (rebuildInBase).
func (in *install) skipScripts() bool { return in.foreign || in.otherNode || !in.scriptsOnRunner }

// native is true when the target is the runner's own platform, libc and Node major.
func (in *install) native() bool { return !in.foreign && !in.otherNode }

// args are the flags every install for the platform gets. npmrc is the project configuration the
// install reads.
func (in *install) args(o *options, npmrc string) []string {
	args := []string{"--omit=dev", "--os=" + in.platform.OS, "--cpu=" + in.cpu, "--libc=" + in.platform.Libc,
		"--no-audit", "--no-fund", "--no-update-notifier", "--cache=" + o.npmCache}
	args = append(args, retryArgs(in.runner, npmrc)...)
	if in.skipScripts() {
		args = append(args, "--ignore-scripts")
	}
	if o.registry != "" {
		args = append(args, "--registry="+o.registry)
	}
	if o.proxy != "" {
		args = append(args, "--proxy="+o.proxy)
	}
	return args
}

// key writes what the install depends on besides its packages.
func (in *install) key(k *keyHash, o *options) {
	k.field("platform", in.platform.String())
	k.field("runner", in.runner.OS+"/"+in.runner.CPU+"/"+in.runner.Libc)
	k.field("node", in.runner.Node)
	k.field("npm", in.runner.Npm)
	k.field("base node", major(in.baseNode))
	k.field("registry", o.registry)
	k.field("proxy", o.proxy)
	k.field("user config", stripAuth(readOptional(userConfig())))
	k.field("global config", stripAuth(readOptional(globalConfig(in.runner))))
	k.field("environment", npmEnvironment())
}

// fetchRetryWaits are npm's waits between the tries of a request that failed, shortened: npm
// waits 10 s, then 60 s (fetch-retry-mintimeout, fetch-retry-maxtimeout), so that an npm
// registry out of reach cost over two minutes before npm said so. With 1 s and 5 s, the same
// number of tries (fetch-retries) fails in seconds. npm configuration that sets them (an .npmrc
// the install reads, npm_config_* variables) is left to decide.
var fetchRetryWaits = map[string]string{"fetch-retry-mintimeout": "1000", "fetch-retry-maxtimeout": "5000"}

func retryArgs(r *Runner, npmrc string) []string {
	configs := []string{npmrc, readOptional(userConfig()), readOptional(globalConfig(r))}
	var args []string
	for _, key := range []string{"fetch-retry-mintimeout", "fetch-retry-maxtimeout"} {
		if !npmConfigured(key, configs) {
			args = append(args, "--"+key+"="+fetchRetryWaits[key])
		}
	}
	return args
}

// npmConfigured reports whether the environment or one of the .npmrc texts sets key.
func npmConfigured(key string, npmrcs []string) bool {
	env := "npm_config_" + strings.ReplaceAll(key, "-", "_")
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.EqualFold(k, env) {
			return true
		}
	}
	for _, npmrc := range npmrcs {
		for _, line := range strings.Split(npmrc, "\n") {
			k, _, ok := strings.Cut(line, "=")
			if ok && strings.TrimSpace(k) == key {
				return true
			}
		}
	}
	return false
}

// unreachable says in a sentence which npm registry npm could not reach, and what it wanted
// from it, when that is why it failed; "" otherwise.
func unreachable(out string) string {
	code := npmErrorCode.FindStringSubmatch(out)
	if code == nil {
		return ""
	}
	switch code[1] {
	case "ENOTCACHED":
		return "npm is offline (its offline setting) and its cache lacks a package the install needs: run the install once with the npm registry in reach, or fill npm's cache"
	case "ECONNREFUSED", "ENOTFOUND", "EAI_AGAIN", "ETIMEDOUT", "ENETUNREACH", "EHOSTUNREACH", "ECONNRESET", "ECONNECTIONTIMEOUT":
	default:
		return ""
	}
	what := "the npm registry"
	if m := npmFetchFailed.FindStringSubmatch(out); m != nil {
		u, reason := m[1], m[2]
		if parsed, err := url.Parse(u); err == nil && parsed.Host != "" {
			return fmt.Sprintf("npm cannot reach the npm registry %s://%s (%s), needed to fetch %s: it is what runtime.registry, an .npmrc or the runner's npm configuration names; npm installs without it only what its cache holds",
				parsed.Scheme, parsed.Host, reason, u)
		}
		what += " " + u
	}
	return fmt.Sprintf("npm cannot reach %s (%s): it is what runtime.registry, an .npmrc or the runner's npm configuration names; npm installs without it only what its cache holds", what, code[1])
}

var (
	npmErrorCode   = regexp.MustCompile(`(?m)^npm error code (E[A-Z]+)$`)
	npmFetchFailed = regexp.MustCompile(`(?m)request to (\S+) failed, reason: (.*)$`)
)

// keyHash is a sha256 of named fields, each length-prefixed so that no two lists of fields
// hash alike. rest hashes the same fields but the content ones (the package.json and the
// lockfile): the key of the install's kept tree (incremental installs).
type keyHash struct{ h, rest hash.Hash }

func newKey(kind string) *keyHash {
	k := &keyHash{h: sha256.New(), rest: sha256.New()}
	// 2: hard links are written as links; a layer kept under a key of 1 holds their files twice
	k.field("toa-deploy layer", kind+" 2")
	return k
}

func (k *keyHash) field(name, value string) {
	k.content(name, value)
	fmt.Fprintf(k.rest, "%s %d\n%s\n", name, len(value), value)
}

// content is a field of the key that the kept tree's key leaves out: a changed lockfile is
// installed over the tree of the one before.
func (k *keyHash) content(name, value string) {
	fmt.Fprintf(k.h, "%s %d\n%s\n", name, len(value), value)
}

func (k *keyHash) String() string { return hex.EncodeToString(k.h.Sum(nil)) }

// withoutContent is the key of every field but the content ones.
func (k *keyHash) withoutContent() string { return "tree-" + hex.EncodeToString(k.rest.Sum(nil)) }

// runNpm runs npm in dir and returns what it wrote (its last 256 KiB).
func (o *options) runNpm(ctx context.Context, dir string, args ...string) (string, error) {
	npm, err := exec.LookPath("npm")
	if err != nil {
		return "", fmt.Errorf("npm is not on PATH: toa-push installs the dependencies with the runner's npm; install Node.js")
	}
	cmd := exec.CommandContext(ctx, npm, args...)
	cmd.Dir = dir
	cmd.Env = environment()
	if slices.Contains(args, "--ignore-scripts") {
		// also for the npm that pacote starts in the clone of a git dependency to prepare it,
		// which inherits the environment and not the flag
		cmd.Env = append(cmd.Env, "npm_config_ignore_scripts=true")
	}
	out := &tail{max: 256 << 10}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.WaitDelay = 10 * time.Second
	processGroup(cmd)
	err = cmd.Run()
	if ctx.Err() != nil {
		return out.String(), ctx.Err()
	}
	return out.String(), err
}

// environment is the runner's, for npm: NODE_ENV=production as in the image, and without the
// variables that would move the install elsewhere (npm_config_prefix, _global, _location, as
// `npm run` sets them when toa-push runs from a script).
func environment() []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch strings.ToLower(k) {
		case "npm_config_prefix", "npm_config_global", "npm_config_location", "npm_config_local_prefix", "node_env":
			continue
		}
		if secretVariables[k] {
			continue // dependency scripts run with this environment
		}
		env = append(env, kv)
	}
	return append(env, "NODE_ENV=production")
}

// secretVariables are toa-push's own secrets and the registries' and cluster's credentials,
// which no dependency's install script may read.
var secretVariables = map[string]bool{"TOA_SIGN_KEY": true, "COSIGN_PASSWORD": true, "COSIGN_KEY": true,
	"DOCKER_CONFIG": true, "REGISTRY_AUTH_FILE": true, "KUBECONFIG": true, "DOCKER_AUTH_CONFIG": true}

// npmEnvironment is the npm configuration in the environment, without credentials: part of the
// cache keys.
func npmEnvironment() string {
	var lines []string
	for _, kv := range environment() {
		k, v, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(strings.ToLower(k), "npm_config_") && !isAuthKey(k) {
			lines = append(lines, strings.ToLower(k)+"="+v)
		}
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

// userConfig is the runner's user .npmrc as npm finds it.
func userConfig() string {
	for _, k := range []string{"npm_config_userconfig", "NPM_CONFIG_USERCONFIG"} {
		if v := os.Getenv(k); v != "" {
			return v
		}
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return ""
	}
	return filepath.Join(home, ".npmrc")
}

// globalConfig is the runner's global npmrc as npm finds it: <node's prefix>/etc/npmrc.
func globalConfig(r *Runner) string {
	for _, k := range []string{"npm_config_globalconfig", "NPM_CONFIG_GLOBALCONFIG"} {
		if v := os.Getenv(k); v != "" {
			return v
		}
	}
	prefix := os.Getenv("PREFIX")
	if prefix == "" {
		if r.ExecPath == "" {
			return ""
		}
		prefix = filepath.Dir(filepath.Dir(r.ExecPath))
	}
	return filepath.Join(prefix, "etc", "npmrc")
}

func readOptional(path string) string {
	if path == "" {
		return ""
	}
	data, err := fsys.ReadFile(path, fsys.MaxPackageSize) // a pipe or a device is left out, not waited on
	if err != nil {
		return ""
	}
	return string(data)
}

// isAuthKey reports whether an npm configuration key holds a credential, which a cache key
// leaves out: a new token installs the same packages.
func isAuthKey(key string) bool {
	k := strings.ToLower(key)
	for _, s := range []string{"_auth", "token", "password", "username", "email", "otp", "certfile", "keyfile"} {
		if strings.Contains(k, s) {
			return true
		}
	}
	return k == "cert" || k == "key" || strings.HasSuffix(k, ":cert") || strings.HasSuffix(k, ":key") ||
		strings.HasSuffix(k, "_cert") || strings.HasSuffix(k, "_key")
}

// stripAuth drops the lines of an .npmrc that hold credentials.
func stripAuth(npmrc string) string {
	var lines []string
	for _, line := range strings.Split(npmrc, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || line[0] == ';' || line[0] == '#' {
			continue
		}
		k, _, _ := strings.Cut(line, "=")
		if !isAuthKey(strings.TrimSpace(k)) {
			lines = append(lines, line)
		}
	}
	return strings.Join(lines, "\n")
}

// npmrcOf writes configuration as .npmrc lines, in the order of the keys.
func npmrcOf(config map[string]string) string {
	keys := make([]string, 0, len(config))
	for k := range config {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%s=%s\n", k, config[k])
	}
	return b.String()
}

// warnings are npm's "npm warn" lines.
func warnings(output string) []string {
	var w []string
	for _, line := range strings.Split(output, "\n") {
		rest, ok := strings.CutPrefix(line, "npm warn ")
		if rest = strings.TrimPrefix(rest, "install-scripts"); ok && strings.TrimSpace(rest) != "" {
			w = append(w, strings.TrimSpace(rest))
		}
	}
	return w
}

// tail keeps the last max bytes written to it.
type tail struct {
	max int
	buf []byte
	cut bool
}

func (t *tail) Write(p []byte) (int, error) {
	t.buf = append(t.buf, p...)
	if len(t.buf) > 2*t.max {
		t.buf = append(t.buf[:0], t.buf[len(t.buf)-t.max:]...)
		t.cut = true
	}
	return len(p), nil
}

func (t *tail) String() string {
	b := t.buf
	if len(b) > t.max {
		b = b[len(b)-t.max:]
		t.cut = true
	}
	if t.cut {
		return "...\n" + string(b)
	}
	return string(b)
}
