package layer

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/toa-deploy/toa-deploy/internal/fault"
	"github.com/toa-deploy/toa-deploy/internal/fsys"
)

// scriptPolicyJS asks the runner's npm which packages' install scripts it would run (see the file).
//
//go:embed scriptpolicy.js
var scriptPolicyJS []byte

// scriptPolicy is what scriptpolicy.js answers.
type scriptPolicy struct {
	Source    string           `json:"source"`    // "package.json", ".npmrc", "cli"; "" without a policy
	Dangerous bool             `json:"dangerous"` // dangerously-allow-all-scripts
	Strict    bool             `json:"strict"`    // strict-allow-scripts
	Verdicts  map[string]*bool `json:"verdicts"`  // by location: allowed, denied, nil when not covered
}

// policyTimeout bounds the run of scriptpolicy.js: npm loading its configuration and reading
// the installed tree, natively, takes a second or less.
const policyTimeout = 2 * time.Minute

// runnerNpmRoot is the package folder of npm on PATH when it has npm's allowScripts policy
// (npm 11), else "": an npm without it runs every package's install scripts.
func runnerNpmRoot() string {
	bin, err := exec.LookPath("npm")
	if err != nil {
		return ""
	}
	file, err := filepath.EvalSymlinks(bin)
	if err != nil {
		return ""
	}
	for dir := filepath.Dir(file); dir != filepath.Dir(dir); dir = filepath.Dir(dir) {
		var p struct{ Name string }
		data, err := os.ReadFile(filepath.Join(dir, "package.json"))
		if err != nil || json.Unmarshal(data, &p) != nil || p.Name != "npm" {
			continue
		}
		for _, need := range []string{"lib/utils/resolve-allow-scripts.js", "node_modules/@npmcli/arborist/lib/script-allowed.js"} {
			if !fileExists(filepath.Join(dir, need)) {
				return ""
			}
		}
		return dir
	}
	return ""
}

// allowedScripts keeps the packages whose install scripts the runner's npm would have run for
// this install had it run them (its allowScripts policy, read by npm's own code from the
// install's package.json, .npmrc files and environment) and warns, naming each, about those it
// would not run. A package the policy does not cover runs, as npm runs it, with npm's own
// warning; with strict-allow-scripts npm refuses the install, and so does this.
func (o *options) allowedScripts(ctx context.Context, in *install, what, dir string, pkgs []scriptPackage) ([]scriptPackage, error) {
	npmRoot := runnerNpmRoot()
	if npmRoot == "" {
		return pkgs, nil
	}
	stagingRoot := o.stagingRootOf(dir)
	policy := scriptPolicy{}
	var warnings string
	var err error
	if mentionsScriptPolicy(in, npmRoot, dir) {
		policy, warnings, err = askScriptPolicy(ctx, npmRoot, o.npmCache, dir, stagingRoot, pkgs)
	}
	if warnings != "" {
		o.warn(fmt.Sprintf("npm for %s on %s:\n  %s", what, in.platform, strings.ReplaceAll(strings.TrimSpace(warnings), "\n", "\n  ")))
	}
	if err != nil {
		return nil, fmt.Errorf("ask the runner's npm (%s) which install scripts of %s its allowScripts policy allows: %w", npmRoot, what, err)
	}
	if policy.Dangerous {
		return pkgs, nil
	}
	var allowed, denied, unreviewed []scriptPackage
	for _, p := range pkgs {
		switch v := policy.Verdicts["node_modules/"+p.Path]; {
		case v == nil:
			unreviewed = append(unreviewed, p)
			allowed = append(allowed, p)
		case *v:
			allowed = append(allowed, p)
		default:
			denied = append(denied, p)
		}
	}
	source := policy.Source
	if source == "" {
		source = "none"
	}
	if len(unreviewed) > 0 && policy.Strict {
		return nil, &fault.Input{File: filepath.Join(strings.TrimPrefix(dir, stagingRoot), "package.json"),
			Key:     "allowScripts",
			Message: fmt.Sprintf("strict-allow-scripts: %d packages of %s have install scripts not covered by allowScripts (policy: %s), so npm would not install them:\n    %s", len(unreviewed), what, source, describe(unreviewed)),
			Hint:    "approve them with `npm install-scripts approve <package>`, deny them with `npm install-scripts deny <package>`, or set dangerously-allow-all-scripts"}
	}
	if len(unreviewed) > 0 { // npm's own advisory, which it prints when it runs them
		covered := "no allowScripts policy covers them"
		if policy.Source != "" {
			covered = "the allowScripts policy (" + policy.Source + ") does not cover them"
		}
		o.warn(fmt.Sprintf("the install scripts of %d packages of %s run for %s inside its base, as the runner's npm runs them, though %s (npm install-scripts approve|deny sets it):\n    %s",
			len(unreviewed), what, in.platform, covered, describe(unreviewed)))
	}
	if len(denied) > 0 {
		o.warn(fmt.Sprintf("the install scripts of %d packages of %s are not run for %s: allowScripts (%s) denies them, as the runner's npm decides:\n    %s",
			len(denied), what, in.platform, source, describe(denied)))
	}
	return allowed, nil
}

// policyWords are how npm's allowScripts settings are spelt in package.json, an .npmrc and the
// environment (allowScripts, allow-scripts, strict-allow-scripts, dangerously-allow-all-scripts,
// npm_config_allow_scripts...).
var policyWords = []string{"allowscripts", "allow-scripts", "allow_scripts", "allow-all-scripts", "allow_all_scripts"}

// mentionsScriptPolicy reports whether anything npm reads its allowScripts settings from mentions
// one: the install's package.json and .npmrc, the user's, the global and npm's builtin npmrc, the
// environment. When nothing does, npm's answer is known without asking it (no policy, nothing
// strict: every package's scripts run, with its advisory), which saves starting npm.
func mentionsScriptPolicy(in *install, npmRoot, dir string) bool {
	files := []string{filepath.Join(dir, "package.json"), filepath.Join(dir, ".npmrc"), userConfig(),
		filepath.Join(npmRoot, "npmrc")}
	if in.runner != nil {
		files = append(files, globalConfig(in.runner))
	}
	for _, f := range files {
		if mentions(readOptional(f)) {
			return true
		}
	}
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); mentions(k) {
			return true
		}
	}
	return false
}

func mentions(s string) bool {
	s = strings.ToLower(s)
	for _, w := range policyWords {
		if strings.Contains(s, w) {
			return true
		}
	}
	return false
}

// stagingRootOf is the staging folder (deps.go's staging) that holds the install folder dir.
func (o *options) stagingRootOf(dir string) string {
	parent := fsys.Staging.Dir(o.cacheRoot)
	rel, err := filepath.Rel(parent, dir)
	if err != nil || strings.HasPrefix(rel, "..") {
		return ""
	}
	return filepath.Join(parent, strings.Split(rel, string(filepath.Separator))[0])
}

// askScriptPolicy runs scriptpolicy.js with the runner's node in dir, in npm's environment.
// stagingRoot is taken off the local packages' paths, which npm's policy matches
// (`file:/path/to/package`), so that they read as in the project.
func askScriptPolicy(ctx context.Context, npmRoot, cache, dir, stagingRoot string, pkgs []scriptPackage) (scriptPolicy, string, error) {
	locations := make([]string, len(pkgs))
	for i, p := range pkgs {
		locations[i] = "node_modules/" + p.Path
	}
	list, err := json.Marshal(locations)
	if err != nil {
		return scriptPolicy{}, "", err
	}
	script, err := os.CreateTemp("", "toa-script-policy-*.js")
	if err != nil {
		return scriptPolicy{}, "", err
	}
	defer os.Remove(script.Name())
	if _, err := script.Write(scriptPolicyJS); err != nil {
		script.Close()
		return scriptPolicy{}, "", err
	}
	if err := script.Close(); err != nil {
		return scriptPolicy{}, "", err
	}
	ctx, cancel := context.WithTimeout(ctx, policyTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", script.Name(), npmRoot, cache, stagingRoot, string(list))
	cmd.Dir = dir
	cmd.Env = environment()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &limitedBuffer{b: &stdout}, &limitedBuffer{b: &stderr}
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Run(); err != nil {
		return scriptPolicy{}, "", fmt.Errorf("%w\n%s", err, indent(stderr.String()))
	}
	var policy scriptPolicy
	if err := json.Unmarshal(stdout.Bytes(), &policy); err != nil {
		return scriptPolicy{}, "", fmt.Errorf("read its answer: %w\n%s", err, indent(stdout.String()))
	}
	return policy, stderr.String(), nil
}
