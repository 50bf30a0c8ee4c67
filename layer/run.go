package layer

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/toa-deploy/toa-deploy/internal/app/toa"
	"github.com/toa-deploy/toa-deploy/internal/fault"
	"github.com/toa-deploy/toa-deploy/internal/fsys"
	"github.com/toa-deploy/toa-deploy/layer/sandbox"
)

// SplitLines sorts build.run lines: those that are npm's global installs and configuration
// (ParseRun reads them) and the others, which run in the base (Run), each in order. Empty lines
// and comments are dropped. Steps keeps their order.
func SplitLines(lines []string) (npm, shell []string) {
	for _, line := range lines {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if _, _, err := ParseRun(line); err == nil {
			npm = append(npm, line)
		} else {
			shell = append(shell, line)
		}
	}
	return npm, shell
}

// compositionDir is where the components are in the image, the WORKDIR of Toa 289's Dockerfiles.
const compositionDir = "/" + Root

// Run is the layer of what build.run lines change in the base of the platform (WithBase: the
// base with the layers of the steps before these lines), as the RUNs of Toa 289's
// dependencies.Dockerfile: each line runs with /bin/sh -c inside the base (package sandbox), in
// order, in /composition where each component's package.json and lockfile are (read-only), with
// the build's environment (buildEnv: NODE_ENV=production, registry.build.arguments, npm's
// registry, proxy and configuration) and nothing else of the runner's; the files they add and
// change, and OCI whiteouts for the ones they remove, make one layer (the places the sandbox
// mounts over are not in it). It is kept in the cache under the layers of the base (their chain
// ID), the platform, the lines, the package files and what the environment takes from the
// runner. No lines: nil, nil.
func Run(ctx context.Context, lines []string, components []*toa.Component, p Platform, opts ...Option) (v1.Layer, error) {
	if len(lines) == 0 {
		return nil, nil
	}
	o, err := newOptions(opts)
	if err != nil {
		return nil, err
	}
	if o.base == nil {
		return nil, fmt.Errorf("run build.run for %s: no base image to run it in", p)
	}
	files, err := packageFiles(components)
	if err != nil {
		return nil, err
	}
	k, err := o.runKey(lines, files, o.npmConfig, p, true)
	if err != nil {
		return nil, err
	}
	if l := o.lookup("run", k); l != nil {
		return l, nil
	}
	root, cfg, err := o.baseRoot(ctx)
	if err != nil {
		return nil, err
	}
	if err := hasShell(root, lines, p); err != nil {
		return nil, err
	}
	staging, err := o.staging("run")
	if err != nil {
		return nil, err
	}
	defer fsys.RemoveAll(staging)
	upper := filepath.Join(staging, "upper")
	if err := os.Mkdir(upper, 0o755); err != nil {
		return nil, err
	}
	binds, err := files.binds(filepath.Join(staging, "composition"))
	if err != nil {
		return nil, err
	}
	env := o.buildEnv(cfg, root, o.npmConfig)
	for _, line := range lines {
		var out bytes.Buffer
		err := sandbox.Run(ctx, o.sandboxCommand(sandbox.Command{Root: root, Upper: upper, Platform: platformName(p),
			Args: []string{"/bin/sh", "-c", line}, Env: env, Dir: compositionDir, Binds: binds,
			Stdout: &limitedBuffer{b: &out}, Stderr: &limitedBuffer{b: &out}}, fmt.Sprintf("`%s`", line)))
		var exit *sandbox.ExitError
		if errors.As(err, &exit) {
			return nil, &fault.Input{Key: "registry.build.run",
				Message: fmt.Sprintf("`%s` failed in the base for %s: exit status %d\n%s", line, p, exit.Code, indent(out.String())),
				Hint:    "fix the line, or run it in a base of that platform to see why"}
		}
		if err != nil {
			return nil, fmt.Errorf("run `%s` in the base for %s: %w", line, p, bounded(err, "the line"))
		}
	}
	mounts := append(sandbox.MountTargets(binds), compositionDir) // the working folder, made for the lines
	l, err := o.writeLayer(func(w *tarWriter) error { return w.changes(root, upper, mounts) })
	if err != nil {
		return nil, fmt.Errorf("write the layer of build.run for %s: %w", p, err)
	}
	if err := o.keep("run", k, l); err != nil {
		return nil, fmt.Errorf("keep the layer of build.run in the cache %s: %w", o.layersDir(), err)
	}
	return l, nil
}

// runKey is the cache key of Run's layer; warn says an argument that is not set.
func (o *options) runKey(lines []string, files pkgFiles, config map[string]string, p Platform, warn bool) (string, error) {
	chain, err := sandbox.ChainID(o.base)
	if err != nil {
		return "", fmt.Errorf("read the layers of the base for %s: %w", p, err)
	}
	key := newKey("run 2")
	key.field("base", chain.String())
	key.field("platform", p.String())
	for _, line := range lines {
		key.field("line", line)
	}
	for _, f := range files {
		key.field("file "+f.name, string(f.data))
	}
	o.envKey(key, config)
	if warn {
		for _, name := range o.arguments {
			if _, ok := os.LookupEnv(name); !ok {
				o.warn(fmt.Sprintf("registry.build.arguments names %s, which is not set in this environment: build.run runs without it", name))
			}
		}
	}
	return key.String(), nil
}

// pkgFile is a component's package.json or lockfile, at its place under /composition.
type pkgFile struct {
	name string // "native-addon/package.json", under /composition
	data []byte
}

type pkgFiles []pkgFile

// packageFiles are the package.json and lockfile of each component, at /composition/<label>/,
// where 289's COPY put them before its RUNs.
func packageFiles(components []*toa.Component) (pkgFiles, error) {
	var files pkgFiles
	for _, c := range components {
		for _, file := range []string{c.PackageJSON, c.Lockfile} {
			if file == "" {
				continue
			}
			limit := int64(fsys.MaxPackageSize)
			if file != c.PackageJSON {
				limit = fsys.MaxLockSize
			}
			data, err := fsys.ReadFile(file, limit)
			if err != nil {
				return nil, err
			}
			files = append(files, pkgFile{name: c.Locator.Label + "/" + filepath.Base(file), data: data})
		}
	}
	sort.Slice(files, func(i, j int) bool { return files[i].name < files[j].name })
	return files, nil
}

// binds writes the files under dir and binds each, read-only, at its place in the base.
func (f pkgFiles) binds(dir string) ([]sandbox.Bind, error) {
	var binds []sandbox.Bind
	for _, file := range f {
		p := filepath.Join(dir, filepath.FromSlash(file.name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return nil, err
		}
		if err := os.WriteFile(p, file.data, 0o644); err != nil {
			return nil, err
		}
		binds = append(binds, sandbox.Bind{Source: p, Target: path.Join(compositionDir, file.name), ReadOnly: true})
	}
	return binds, nil
}

// hasShell is the *fault.Input of a base without the /bin/sh the lines run with.
func hasShell(root string, lines []string, p Platform) error {
	if info, err := os.Lstat(filepath.Join(root, "bin", "sh")); err != nil || info.IsDir() {
		return &fault.Input{Key: "registry.build.run", Err: ErrNoShell,
			Message: fmt.Sprintf("`%s`: the base for %s has no /bin/sh to run it", lines[0], p),
			Hint:    "use a base image with a shell (registry.build.image), or move what this line makes into the base"}
	}
	return nil
}

// ErrNoShell is what the *fault.Input of a build.run line for a base without /bin/sh wraps.
var ErrNoShell = errors.New("the base has no shell")

// changes writes what the runs of upper changed in root (sandbox.Changes) as an OCI layer:
// files and folders with their modes, a whiteout (.wh.<name>) for each entry a run removed and an
// opaque marker (.wh..wh..opq) in each folder that replaced the base's. What the sandbox made
// only to mount over (mounts: a bind's target, the folders on the way to it) is not a change of
// the lines': as BuildKit leaves the mounts of a RUN out of its layer.
func (w *tarWriter) changes(root, upper string, mounts []string) error {
	made := mountPaths(mounts)
	return sandbox.Changes(root, upper, func(c sandbox.Change) error {
		name := c.Name
		if made[name] && !c.Opaque {
			return nil // a folder a line wrote into still gets its entry before what it holds
		}
		if c.Whiteout {
			if err := w.dir(path.Dir(name)); err != nil {
				return err
			}
			return w.tw.WriteHeader(w.header(tar.TypeReg, path.Join(path.Dir(name), ".wh."+path.Base(name)), 0o644))
		}
		info := c.Info
		mode := tarMode(info.Mode())
		switch {
		case info.IsDir():
			if err := w.dir(path.Dir(name)); err != nil {
				return err
			}
			w.written[name+"/"] = true
			if err := w.tw.WriteHeader(w.header(tar.TypeDir, name+"/", mode)); err != nil {
				return err
			}
			if c.Opaque {
				return w.tw.WriteHeader(w.header(tar.TypeReg, name+"/.wh..wh..opq", 0o644))
			}
			return nil
		case info.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(c.Path)
			if err != nil {
				return err
			}
			return w.symlink(name, target)
		case info.Mode().IsRegular():
			f, err := os.Open(c.Path)
			if err != nil {
				return err
			}
			defer f.Close()
			if err := w.dir(path.Dir(name)); err != nil {
				return err
			}
			h := w.header(tar.TypeReg, name, mode)
			h.Size = info.Size()
			if err := w.tw.WriteHeader(h); err != nil {
				return err
			}
			_, err = io.CopyBuffer(w.tw, io.LimitReader(f, info.Size()), w.buf)
			return err
		}
		return nil // sockets, fifos, devices a run made: not in an image
	})
}

func tarMode(m fs.FileMode) int64 {
	mode := int64(m.Perm())
	if m&fs.ModeSetuid != 0 {
		mode |= 0o4000
	}
	if m&fs.ModeSetgid != 0 {
		mode |= 0o2000
	}
	if m&fs.ModeSticky != 0 {
		mode |= 0o1000
	}
	return mode
}

// mountPaths are the mount targets (absolute, in the root) and every folder on the way to each,
// as Changes names them (relative, slash-separated).
func mountPaths(mounts []string) map[string]bool {
	made := map[string]bool{}
	for _, m := range mounts {
		for rel := strings.TrimPrefix(path.Clean(m), "/"); rel != "." && rel != "" && rel != "/"; rel = path.Dir(rel) {
			made[rel] = true
		}
	}
	return made
}
