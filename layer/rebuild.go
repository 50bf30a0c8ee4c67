package layer

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/toa-deploy/toa-deploy/internal/fsys"
	"github.com/toa-deploy/toa-deploy/layer/sandbox"
)

// WithBase gives the base image of the platform. With it, the install scripts and native builds
// that npm on the runner cannot run for a foreign platform or another Node major run inside the
// base (package sandbox), with the base's own node and npm, and build.run lines run there.
func WithBase(img v1.Image) Option { return func(o *options) { o.base = img } }

// scriptPackage is an installed package with install scripts (or a binding.gyp npm builds).
type scriptPackage struct {
	Name, Version, Path string
	Scripts             []string // "postinstall", "binding.gyp"
}

// findScripts lists the packages under modules that npm would run install scripts for.
func findScripts(modules string) ([]scriptPackage, error) {
	var found []scriptPackage
	err := walkPackages(modules, "", func(dir, rel string, p packageJSON, linked bool) {
		if linked {
			return
		}
		var scripts []string
		for _, s := range []string{"preinstall", "install", "postinstall"} {
			if p.Scripts[s] != "" {
				scripts = append(scripts, s)
			}
		}
		if p.Scripts["install"] == "" && p.Scripts["preinstall"] == "" && (p.Gypfile == nil || *p.Gypfile) &&
			fileExists(filepath.Join(dir, "binding.gyp")) {
			scripts = append(scripts, "binding.gyp")
		}
		if len(scripts) > 0 {
			found = append(found, scriptPackage{Name: p.Name, Version: p.Version, Path: rel, Scripts: scripts})
		}
	})
	if err != nil {
		return nil, fmt.Errorf("look for install scripts in %s: %w", modules, err)
	}
	return found, nil
}

// walkPackages calls visit for every package under the node_modules folder dir, nested ones
// included; a package that is a link (npm's install of a `file:` folder) is visited with
// linked set, and not walked into.
func walkPackages(dir, rel string, visit func(dir, rel string, p packageJSON, linked bool)) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, ".") {
			continue
		}
		var pkgs []string
		if strings.HasPrefix(name, "@") {
			scoped, _ := os.ReadDir(filepath.Join(dir, name))
			for _, s := range scoped {
				pkgs = append(pkgs, path.Join(name, s.Name()))
			}
		} else {
			pkgs = []string{name}
		}
		for _, pkg := range pkgs {
			pkgDir := filepath.Join(dir, pkg)
			data, err := os.ReadFile(filepath.Join(pkgDir, "package.json"))
			if err != nil && !errors.Is(err, os.ErrNotExist) {
				return err
			}
			info, lerr := os.Lstat(pkgDir)
			linked := lerr != nil || info.Mode()&os.ModeSymlink != 0
			var p packageJSON
			if err == nil && json.Unmarshal(data, &p) == nil {
				visit(pkgDir, path.Join(rel, pkg), p, linked)
			}
			if linked {
				continue
			}
			if err := walkPackages(filepath.Join(pkgDir, "node_modules"), path.Join(rel, pkg, "node_modules"), visit); err != nil {
				return err
			}
		}
	}
	return nil
}

var ignoreScriptsLine = regexp.MustCompile(`(?m)^\s*ignore-scripts\s*=\s*true\s*$`)

// scriptsIgnored says where npm's configuration turns install scripts off, or "".
func scriptsIgnored(npmrc string) string {
	if v := os.Getenv("npm_config_ignore_scripts"); v == "true" {
		return "npm_config_ignore_scripts=true"
	}
	if v := os.Getenv("NPM_CONFIG_IGNORE_SCRIPTS"); v == "true" {
		return "NPM_CONFIG_IGNORE_SCRIPTS=true"
	}
	for _, cfg := range []string{npmrc, readOptional(userConfig())} {
		if ignoreScriptsLine.MatchString(cfg) {
			return "ignore-scripts=true in npm's configuration"
		}
	}
	return ""
}

// describe names the packages and their scripts, one a line.
func describe(pkgs []scriptPackage) string {
	lines := make([]string, len(pkgs))
	for i, p := range pkgs {
		lines[i] = fmt.Sprintf("%s@%s (node_modules/%s): %s", p.Name, p.Version, p.Path, strings.Join(p.Scripts, ", "))
	}
	return strings.Join(lines, "\n    ")
}

// rebuildInBase runs, inside the platform's base (WithBase: the base with the layers of the
// build.run lines below), the install scripts npm on the runner skipped, of the packages the
// runner's npm would have run them for (its allowScripts policy, allowedScripts): through the
// base npm's own @npmcli/run-script (runscript.js) with the base's node, or `npm rebuild
// <packages>` for another npm layout (scriptsCommand). binds put the installed packages at their
// place in the image (a component's node_modules at target/node_modules with its package files
// read-only beside it; the global packages each at its place in the base's prefix), so that what
// the scripts build lands in the tree the layer is written from. Nothing else of the runner's is
// there: not the staging folder's .npmrc, not npm's cache (buildEnv).
//
// It reports whether the scripts were dealt with: not when there are none, or when the base has
// no shell and npm to run them (a warning names the packages then, and native code is refused);
// yes when they ran, or npm's configuration or policy turned them all off (a warning names
// them). only, when set, keeps the packages (by install path under modules) whose scripts run.
func (o *options) rebuildInBase(ctx context.Context, in *install, what, npmrc, modules, dir, target string, only func(rel string) bool, binds []sandbox.Bind) (bool, error) {
	pkgs, err := findScripts(modules)
	pkgs = onlyThese(pkgs, only)
	if err != nil || len(pkgs) == 0 {
		return false, err
	}
	if why := scriptsIgnored(npmrc); why != "" {
		o.warn(fmt.Sprintf("the install scripts of %d packages of %s are not run for %s: %s:\n    %s",
			len(pkgs), what, in.platform, why, describe(pkgs)))
		return true, nil
	}
	// the base unpacks (cold: seconds) while the runner's npm says which scripts may run
	unpackCtx, cancelUnpack := context.WithCancel(ctx)
	defer cancelUnpack()
	unpacked := make(chan unpackedBase, 1)
	go func() {
		root, cfg, err := o.baseRoot(unpackCtx)
		unpacked <- unpackedBase{root, cfg, err}
	}()
	pkgs, err = o.allowedScripts(ctx, in, what, dir, pkgs)
	if err != nil || len(pkgs) == 0 {
		cancelUnpack()
		<-unpacked
		return err == nil, err // none allowed: each was named, nothing is left to run
	}
	base := <-unpacked
	root, cfg := base.root, base.cfg
	if base.err != nil {
		return false, base.err
	}
	if !fileExists(filepath.Join(root, "bin", "sh")) || !hasNpm(root) {
		o.warn(fmt.Sprintf("the install scripts of %d packages of %s are not run for %s: its base has no /bin/sh and npm to run them in:\n    %s",
			len(pkgs), what, in.platform, describe(pkgs)))
		return false, nil
	}
	args, planBinds, cleanup, err := o.scriptsCommand(root, modules, dir, target, pkgs)
	if err != nil {
		return false, err
	}
	defer cleanup()
	upper, err := os.MkdirTemp(filepath.Dir(dir), "upper-")
	if err != nil {
		return false, err
	}
	defer fsys.RemoveAll(upper)
	var out bytes.Buffer
	running := "the install scripts of " + scriptNames(pkgs)
	err = sandbox.Run(ctx, o.sandboxCommand(sandbox.Command{Root: root, Upper: upper, Platform: platformName(in.platform),
		Args: args, Env: o.buildEnv(cfg, root, o.npmConfig), Dir: target, Stdout: &limitedBuffer{b: &out}, Stderr: &limitedBuffer{b: &out},
		Binds: append(planBinds, binds...)}, running))
	var exit *sandbox.ExitError
	if errors.As(err, &exit) {
		runner := "npm rebuild"
		if args[0] != "npm" {
			runner = "the base npm's @npmcli/run-script"
		}
		return false, fmt.Errorf("run the install scripts of %s for %s inside its base: %s: exit status %d\n    %s\n%s",
			what, in.platform, runner, exit.Code, describe(pkgs), indent(out.String()))
	}
	if err != nil {
		return false, fmt.Errorf("run the install scripts of %s for %s inside its base: %w", what, in.platform, bounded(err, scriptNames(pkgs)))
	}
	return true, nil
}

// scriptNames are the packages' name@version, joined.
func scriptNames(pkgs []scriptPackage) string {
	list := make([]string, len(pkgs))
	for i, p := range pkgs {
		list[i] = p.Name + "@" + p.Version
	}
	return strings.Join(list, ", ")
}

// scriptsCommand is what runs the packages' scripts in the base: runscript.js with the base's
// node, through the base npm's own @npmcli/run-script, when the base's npm has it (bound in
// read-only, with its plan); else `npm rebuild <packages>`. cleanup removes what it wrote.
func (o *options) scriptsCommand(root, modules, dir, target string, pkgs []scriptPackage) (args []string, binds []sandbox.Bind, cleanup func(), err error) {
	npmDir := ""
	if !o.npmRebuild {
		npmDir = baseRunScript(root)
	}
	if npmDir == "" {
		names := map[string]bool{}
		for _, p := range pkgs {
			names[p.Name] = true
		}
		args = []string{"npm", "rebuild", "--no-audit", "--no-fund", "--no-update-notifier", "--foreground-scripts"}
		return append(args, sortedKeys(names)...), nil, func() {}, nil
	}
	plan, err := planScripts(modules, pkgs)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("order the install scripts: %w", err)
	}
	plan.Npm, plan.Prefix, plan.Command = npmDir, target, "rebuild"
	folder, err := writeScriptPlan(filepath.Dir(dir), plan)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("write the plan of the install scripts: %w", err)
	}
	args = []string{"node", path.Join(runScriptsDir, "run.js"), path.Join(runScriptsDir, "plan.json")}
	binds = []sandbox.Bind{{Source: folder, Target: runScriptsDir, ReadOnly: true}}
	return args, binds, func() { fsys.RemoveAll(folder) }, nil
}

type unpackedBase struct {
	root string
	cfg  *v1.ConfigFile
	err  error
}

// hasNpm reports whether the base has npm where node images and distributions put it.
func hasNpm(root string) bool {
	for _, p := range []string{"usr/local/bin/npm", "usr/bin/npm", "bin/npm"} {
		if _, err := os.Lstat(filepath.Join(root, p)); err == nil {
			return true
		}
	}
	return false
}

// warnScriptsSkipped names the install scripts npm skipped for a platform it cannot run them
// for, when nothing runs them in the base: never silent.
func (o *options) warnScriptsSkipped(in *install, what, modules string) error {
	pkgs, err := findScripts(modules)
	if err != nil || len(pkgs) == 0 {
		return err
	}
	why := "no base was given to run them in"
	o.warn(fmt.Sprintf("the install scripts of %d packages of %s are not run for %s (%s, from this runner %s): %s:\n    %s",
		len(pkgs), what, in.platform, "Node "+major(in.baseNode), in.runner, why, describe(pkgs)))
	return nil
}

// prefetchBase starts unpacking the base (cold: seconds) while the runner's npm installs, for a
// job whose lockfile says a package has install scripts (job.scripted), so that they can start
// in the base as soon as npm is done; baseRoot takes it. It returns what stops the unpacking
// when nothing took it: a run that fails leaves no half-unpacked base.
func (o *options) prefetchBase(ctx context.Context) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	f := &baseFuture{done: make(chan struct{})}
	go func() {
		defer close(f.done)
		f.root, f.cfg, f.err = o.unpackBase(ctx)
	}()
	o.prefetched = f
	return func() {
		cancel()
		<-f.done
		o.prefetched = nil
	}
}

// baseFuture is a base being unpacked.
type baseFuture struct {
	done chan struct{}
	root string
	cfg  *v1.ConfigFile
	err  error
}

// baseRoot is the base unpacked in the cache, and its config: what prefetchBase unpacked, or
// unpacked now.
func (o *options) baseRoot(ctx context.Context) (string, *v1.ConfigFile, error) {
	if f := o.prefetched; f != nil {
		select {
		case <-f.done:
		case <-ctx.Done():
			return "", nil, ctx.Err()
		}
		if f.err == nil || !errors.Is(f.err, context.Canceled) || ctx.Err() != nil {
			return f.root, f.cfg, f.err
		}
	}
	return o.unpackBase(ctx)
}

func (o *options) unpackBase(ctx context.Context) (string, *v1.ConfigFile, error) {
	cfg, err := o.base.ConfigFile()
	if err != nil {
		return "", nil, fmt.Errorf("read the base's config: %w", err)
	}
	root, err := sandbox.UnpackHeld(ctx, o.base, filepath.Join(o.cacheRoot, "bases"), o.holds)
	if err != nil {
		return "", nil, err
	}
	return root, cfg, nil
}

func platformName(p Platform) string {
	s := p.OS + "/" + p.Architecture
	if p.Variant != "" {
		s += "/" + p.Variant
	}
	return s
}

func sortedKeys(m map[string]bool) []string {
	list := make([]string, 0, len(m))
	for k := range m {
		list = append(list, k)
	}
	sort.Strings(list)
	return list
}

// limitedBuffer keeps the last 256 KiB written to it.
type limitedBuffer struct{ b *bytes.Buffer }

func (l *limitedBuffer) Write(p []byte) (int, error) {
	l.b.Write(p)
	if over := l.b.Len() - 256<<10; over > 0 {
		rest := append([]byte(nil), l.b.Bytes()[over:]...)
		l.b.Reset()
		l.b.Write(rest)
	}
	return len(p), nil
}

func (l *limitedBuffer) String() string { return l.b.String() }
