package layer

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/toa-deploy/toa-deploy/fault"
	"github.com/toa-deploy/toa-deploy/sandbox"
)

// SplitLines sorts build.run lines: those that are npm's global installs and configuration
// (ParseRun reads them, and they keep their runner-side path) and the others, which run in the
// base (Run), each in order. Empty lines and comments are dropped.
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

// Run is the layer of what build.run lines that are not npm commands change in the base of the
// platform (WithBase), as a Dockerfile's RUN: each line runs with /bin/sh -c inside the base
// (package sandbox), in order, in the base's environment with registry.build.arguments
// (WithArguments) from the runner's and nothing else of it; the files they add and change, and
// OCI whiteouts for the ones they remove, make one layer. It is kept in the cache under the
// base's config digest, the lines and the arguments' values. No lines: nil, nil.
func Run(ctx context.Context, lines []string, p Platform, opts ...Option) (v1.Layer, error) {
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
	k, env, err := o.runKey(lines, p, true)
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
	defer os.RemoveAll(staging)
	upper := filepath.Join(staging, "upper")
	if err := os.Mkdir(upper, 0o755); err != nil {
		return nil, err
	}
	dir := cfg.Config.WorkingDir
	if dir == "" {
		dir = "/"
	}
	for _, line := range lines {
		var out bytes.Buffer
		err := sandbox.Run(ctx, sandbox.Command{Root: root, Upper: upper, Platform: platformName(p),
			Args: []string{"/bin/sh", "-c", line}, Env: append(baseEnv(cfg, root), env...), Dir: dir,
			Stdout: &limitedBuffer{b: &out}, Stderr: &limitedBuffer{b: &out}, Notice: o.warn})
		var exit *sandbox.ExitError
		if errors.As(err, &exit) {
			return nil, &fault.Input{Key: "registry.build.run",
				Message: fmt.Sprintf("`%s` failed in the base for %s: exit status %d\n%s", line, p, exit.Code, indent(out.String())),
				Hint:    "fix the line, or run it in a base of that platform to see why"}
		}
		if err != nil {
			return nil, err
		}
	}
	l, err := o.writeLayer(func(w *tarWriter) error { return w.changes(root, upper) })
	if err != nil {
		return nil, fmt.Errorf("write the layer of build.run for %s: %w", p, err)
	}
	if err := o.keep("run", k, l); err != nil {
		return nil, fmt.Errorf("keep the layer of build.run in the cache %s: %w", o.layersDir(), err)
	}
	return l, nil
}

// runKey is the cache key of Run's layer, and the arguments' part of the lines' environment;
// warn says an argument that is not set.
func (o *options) runKey(lines []string, p Platform, warn bool) (string, []string, error) {
	digest, err := o.base.ConfigName()
	if err != nil {
		return "", nil, fmt.Errorf("read the config digest of the base for %s: %w", p, err)
	}
	key := newKey("run")
	key.field("base", digest.String())
	key.field("platform", p.String())
	for _, line := range lines {
		key.field("line", line)
	}
	env := []string{}
	for _, name := range o.arguments {
		if v, ok := os.LookupEnv(name); ok {
			env = append(env, name+"="+v)
			sum := sha256.Sum256([]byte(v))
			key.field("argument "+name, hex.EncodeToString(sum[:]))
		} else if warn {
			o.warn(fmt.Sprintf("registry.build.arguments names %s, which is not set in this environment: build.run runs without it", name))
		}
	}
	return key.String(), env, nil
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
// opaque marker (.wh..wh..opq) in each folder that replaced the base's.
func (w *tarWriter) changes(root, upper string) error {
	return sandbox.Changes(root, upper, func(c sandbox.Change) error {
		name := c.Name
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
