package layer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/toa-deploy/toa-deploy/internal/app/lockfile"
	"github.com/toa-deploy/toa-deploy/internal/app/toa"
	"github.com/toa-deploy/toa-deploy/internal/fault"
	"github.com/toa-deploy/toa-deploy/internal/fsys"
	"github.com/toa-deploy/toa-deploy/layer/sandbox"
)

// ErrLockfileOutOfSync is what the *fault.Input of an out-of-sync package-lock.json wraps.
var ErrLockfileOutOfSync = errors.New("package-lock.json is out of sync with package.json")

// ErrNativeCode is what the *fault.Input of packages that build native code for another platform
// wraps.
var ErrNativeCode = errors.New("packages build native code at install")

// Dependencies is the layer of the component's production dependencies for the platform:
// /composition/<label>/node_modules as npm on the runner installs it into a staging folder, with
// --omit=dev --os linux --cpu <arch> --libc <libc>, so that each platform gets its own prebuilt
// optional packages.
//
// With a package-lock.json (or npm-shrinkwrap.json) npm runs `npm ci`; a lockfile out of sync with
// package.json is a *fault.Input wrapping ErrLockfileOutOfSync that says to run `npm install` and
// commit the lockfile. Without one it runs `npm install` and warns (WithWarnings) that the
// install is not reproducible. npm reads the runner's configuration, the context's .npmrc
// (WithContextRoot) and the component's, WithNpmConfig and WithRegistry; no .npmrc reaches the
// layer. `file:` dependencies are installed as copies (--install-links), not as links that
// would point out of the image.
//
// For a foreign target (its os, cpu or libc is not the runner's) or a base whose Node major is
// not the runner's (WithBaseNode), npm runs with --ignore-scripts, and packages that build or
// download native code at install are refused: a *fault.Input wrapping ErrNativeCode names every
// one and what to do. On the runner's own platform npm runs scripts as its allowScripts setting
// says.
//
// A component without a package.json, or whose package.json has no "dependencies" or
// "optionalDependencies", has no layer: Dependencies returns nil, nil.
//
// The layer is kept in the cache under a key of everything the install reads (package.json,
// the lockfile, `file:` dependencies' contents, platform, the runner's node and npm, the base's
// Node major, registry, proxy, the .npmrc files and npm_config_* variables without credentials),
// so an unchanged component's layer is the same blob, and costs no npm run.
func Dependencies(ctx context.Context, c *toa.Component, p Platform, opts ...Option) (v1.Layer, error) {
	layers, err := dependencies(ctx, c, p, 1, opts)
	if err != nil || len(layers) == 0 {
		return nil, err
	}
	return layers[0], nil
}

// dependencies is the component's node_modules as at most budget layers (DependencyLayers).
func dependencies(ctx context.Context, c *toa.Component, p Platform, budget int, opts []Option) ([]v1.Layer, error) {
	o, err := newOptions(opts)
	if err != nil {
		return nil, err
	}
	if err := checkLabel(c); err != nil {
		return nil, err
	}
	if c.PackageJSON == "" {
		return nil, nil
	}
	var pkg manifest
	pkgData, err := fsys.ReadJSON(c.PackageJSON, fsys.MaxPackageSize, &pkg)
	if err != nil {
		return nil, err
	}
	if len(pkg.Dependencies) == 0 && len(pkg.OptionalDependencies) == 0 {
		return nil, nil
	}
	in, err := o.newInstall(ctx, p)
	if err != nil {
		return nil, err
	}
	o.checkArguments()
	inputs, err := o.readInputs(c, pkg, pkgData)
	if err != nil {
		return nil, err
	}
	return o.runLayers(ctx, in, withSplit(inputs.job(c, in), c, budget))
}

// depsInputs are what npm reads to install a component's dependencies: all of them are in the
// layer's cache key.
type depsInputs struct {
	pkgData  []byte
	lockPath string // the component's Lockfile: npm-shrinkwrap.json, package-lock.json, or ""
	lockData []byte
	// locked are lockData's packages, nil without a lockfile or with one npm will refuse (it
	// says why at the install)
	locked lockfile.Packages
	npmrc  string
	locals []string // the local packages (file: dependencies) it installs
}

func (o *options) readInputs(c *toa.Component, pkg manifest, pkgData []byte) (*depsInputs, error) {
	d := &depsInputs{pkgData: pkgData, lockPath: c.Lockfile}
	var err error
	if d.lockPath != "" {
		if d.lockData, err = fsys.ReadFile(d.lockPath, lockfile.MaxSize); err != nil {
			return nil, err
		}
		d.locked, _ = lockfile.Parse(d.lockData)
	} else {
		o.warn(fmt.Sprintf("%s has no package-lock.json: npm install resolves its dependencies anew, so its images are not reproducible; run `npm install` in %s and commit package-lock.json",
			c.Locator.ID, c.Path))
	}
	if d.npmrc, err = o.projectNpmrc(c); err != nil {
		return nil, err
	}
	locals, err := c.LocalPackages() // folders and regular files within a bound, or an error
	if err != nil {
		return nil, err
	}
	for _, l := range locals {
		d.locals = append(d.locals, l.Path)
	}
	sort.Strings(d.locals) // mirror's order: a folder before what is in it
	return d, nil
}

// job is the install of c's dependencies from these inputs, for the install in.
func (d *depsInputs) job(c *toa.Component, in *install) job {
	key := newKey("dependencies")
	key.field("label", c.Locator.Label)
	key.content("package.json", string(d.pkgData))
	key.content(filepath.Base(d.lockPath), string(d.lockData))
	for _, l := range d.locals {
		key.field("local "+l, hashLocal(l))
	}
	// the component's own path under the staging root, so that relative `file:` paths find
	// their mirrors there
	dirIn := func(staging string) string { return filepath.Join(staging, c.Path) }
	target := "/" + Root + "/" + c.Locator.Label
	var tree *treeSpec
	if installableOver(d.locked) {
		tree = &treeSpec{locked: d.locked}
	}
	return job{
		tree:      tree,
		kind:      "deps",
		what:      "the dependencies of " + c.Locator.ID,
		key:       key,
		npmrc:     d.npmrc,
		cacheable: true,
		stage:     func(staging string) (string, []string, error) { return d.stage(staging, dirIn(staging)) },
		failed: func(out string) error {
			if !strings.Contains(out, "can only install packages when your package.json and package-lock.json") {
				return nil
			}
			return &fault.Input{File: d.lockPath, Err: ErrLockfileOutOfSync,
				Message: "is out of sync with package.json" + missing(out),
				Hint:    fmt.Sprintf("run `npm install` in %s and commit %s", c.Path, filepath.Base(d.lockPath))}
		},
		modules:    func(staging string) string { return filepath.Join(dirIn(staging), "node_modules") },
		native:     func(natives []nativePackage) error { return nativeError(c.PackageJSON, "", in, natives) },
		installDir: dirIn,
		target:     target,
		// node_modules where the image has it, the package files read-only beside it, as 289's
		// `npm i` in /composition/<label> found them; not the staging folder's .npmrc
		installBinds: func(staging string) []sandbox.Bind {
			dir := dirIn(staging)
			binds := []sandbox.Bind{{Source: filepath.Join(dir, "node_modules"), Target: target + "/node_modules"}}
			for _, name := range []string{"package.json", filepath.Base(d.lockPath)} {
				if name != "." && fileExists(filepath.Join(dir, name)) {
					binds = append(binds, sandbox.Bind{Source: filepath.Join(dir, name), Target: target + "/" + name, ReadOnly: true})
				}
			}
			return binds
		},
		scripted: hasScripts(d.locked),
		fill: func(staging string, w *tarWriter) error {
			modules := filepath.Join(dirIn(staging), "node_modules")
			dst := Root + "/" + c.Locator.Label + "/node_modules"
			if !fileExists(modules) {
				return w.dir(dst)
			}
			return w.tree(modules, dst, treeOptions{skip: installedExcluded})
		},
	}
}

// stage writes the component's package files into dir under the staging root, with its local
// packages mirrored, and says how npm installs there.
func (d *depsInputs) stage(staging, dir string) (string, []string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", nil, err
	}
	if err := mirror(staging, dir, d.locals); err != nil {
		return "", nil, err
	}
	files := map[string][]byte{"package.json": d.pkgData}
	if d.lockPath != "" {
		files[filepath.Base(d.lockPath)] = d.lockData
	}
	if d.npmrc != "" {
		files[".npmrc"] = []byte(d.npmrc)
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			return "", nil, err
		}
	}
	if d.lockPath == "" {
		return dir, []string{"install", "--prefix=" + dir, "--install-links"}, nil
	}
	// The lockfile pins every package by name, version and integrity, so what npm's cache holds
	// for it cannot be stale: npm takes it from the cache without asking the registry first, and
	// installs with no registry in reach when the cache has it all (npm's default asks, and falls
	// back to the cache only after its retries, minutes later). npm's own offline=true still turns
	// every cache miss into an error instead of a request.
	return dir, []string{"ci", "--prefix=" + dir, "--install-links", "--prefer-offline"}, nil
}

// installedExcluded are left out of what npm installs: configuration that may hold credentials,
// and repositories of git dependencies.
var installedExcluded = map[string]bool{".npmrc": true, ".git": true}

// manifest is what Dependencies reads of a package.json.
type manifest struct {
	Dependencies         map[string]any `json:"dependencies"`
	OptionalDependencies map[string]any `json:"optionalDependencies"`
}

// checkArguments warns of arguments the runner's environment lacks.
func (o *options) checkArguments() {
	for _, name := range o.arguments {
		if _, ok := os.LookupEnv(name); !ok {
			o.warn(fmt.Sprintf("registry.build.arguments names %s, which is not set in this environment: npm runs without it", name))
		}
	}
}

// projectNpmrc is the .npmrc of the staging folder: the configuration of build.run lines, then
// the context's .npmrc, then the component's, so that the nearer file wins where they disagree.
func (o *options) projectNpmrc(c *toa.Component) (string, error) {
	var b strings.Builder
	if len(o.npmConfig) > 0 {
		b.WriteString(npmrcOf(o.npmConfig))
	}
	paths := []string{}
	if o.contextRoot != "" {
		paths = append(paths, filepath.Join(o.contextRoot, ".npmrc"))
	}
	if own := filepath.Join(c.Path, ".npmrc"); len(paths) == 0 || own != paths[0] {
		paths = append(paths, own)
	}
	for _, path := range paths {
		data, err := fsys.ReadFile(path, fsys.MaxPackageSize)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return "", err
		}
		b.Write(data)
		b.WriteString("\n")
	}
	return b.String(), nil
}

// staging makes a folder for one install, under the cache so that the layer is written on the
// same file system.
func (o *options) staging(name string) (string, error) {
	dir := fsys.Staging.Dir(o.cacheRoot)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("create a staging folder: %w", err)
	}
	sweep(dir, "")
	staging, err := os.MkdirTemp(dir, name+"-")
	if err != nil {
		return "", fmt.Errorf("create a staging folder: %w", err)
	}
	return staging, nil
}

// sweep removes what runs that did not finish left in dir a day ago or earlier: staging folders,
// partial layers (names that begin with prefix).
func sweep(dir, prefix string) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), prefix) {
			continue
		}
		if info, err := e.Info(); err == nil && time.Since(info.ModTime()) > 24*time.Hour {
			fsys.RemoveAll(filepath.Join(dir, e.Name()))
		}
	}
}

// mirror copies each local dependency (a `file:` folder or tarball, a workspace) to its own
// absolute path under the staging root, where the component's relative paths lead from the
// component's folder mirrored there. A copy, as 289's COPY of the build context was, and not a
// link: npm installs a linked folder's own dependencies into it, and nothing of the install may
// write into the user's checkout. A folder's node_modules and .git are not copied (npm pack
// leaves them out too).
func mirror(staging, dir string, locals []string) error {
	var done []string
	for _, source := range locals { // sorted: a folder comes before what is in it
		covered := false
		for _, d := range done {
			if strings.HasPrefix(source, d+string(filepath.Separator)) {
				covered = true
			}
		}
		copied := filepath.Join(staging, source)
		if covered || copied == dir || strings.HasPrefix(dir, copied+string(filepath.Separator)) {
			continue
		}
		if err := copyLocal(source, copied); err != nil {
			return fmt.Errorf("copy the local package %s for the install: %w", source, err)
		}
		done = append(done, source)
	}
	return nil
}

// maxLocalCopy bounds what one local package's copy may hold.
const maxLocalCopy = 1 << 30

// copyLocal copies the folder or file at source to target: folders, regular files (each within
// the bound of a tarball) and links as links; anything else (a FIFO, a device) is left out.
func copyLocal(source, target string) error {
	if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
		return err
	}
	var total int64
	return filepath.WalkDir(source, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(source, p)
		if err != nil {
			return err
		}
		to := filepath.Join(target, rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			if p != source && (d.Name() == "node_modules" || d.Name() == ".git") {
				return filepath.SkipDir
			}
			return os.MkdirAll(to, 0o755)
		case info.Mode()&fs.ModeSymlink != 0:
			link, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return os.Symlink(link, to)
		case info.Mode().IsRegular():
			if total += info.Size(); total > maxLocalCopy {
				return fmt.Errorf("it holds over %d MiB", maxLocalCopy>>20)
			}
			return copyRegular(p, to, info.Mode().Perm())
		}
		return nil
	})
}

// copyRegular copies one regular file, opened without following a link or waiting on a pipe.
func copyRegular(from, to string, perm fs.FileMode) error {
	in, err := fsys.Open(from, fsys.MaxTarballSize)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm|0o200)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, io.LimitReader(in, fsys.MaxTarballSize+1)); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// hashLocal is a hash of a local dependency's files, folder or tarball (toa.HashLocalPackage).
func hashLocal(path string) string {
	h, err := toa.HashLocalPackage(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return "missing"
	case err != nil:
		return "unreadable"
	}
	return h
}

var missingLine = regexp.MustCompile(`(?m)^npm error ((?:Missing|Invalid): .*)$`)

// missing lists what npm ci said the lockfile lacks.
func missing(out string) string {
	m := missingLine.FindAllStringSubmatch(out, 20)
	if len(m) == 0 {
		return ""
	}
	var lines []string
	for _, s := range m {
		lines = append(lines, s[1])
	}
	return ":\n    " + strings.Join(lines, "\n    ")
}

// indent shows npm's output under an error.
func indent(out string) string {
	out = strings.TrimRight(out, "\n")
	lines := strings.Split(out, "\n")
	if len(lines) > 40 {
		lines = append([]string{"..."}, lines[len(lines)-40:]...)
	}
	return "  " + strings.Join(lines, "\n  ")
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
