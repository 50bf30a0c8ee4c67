package layer

import (
	"context"
	"fmt"
	"os"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// job is one npm install whose tree becomes a layer kept in the cache: Dependencies' and
// Global's, which differ only in what npm is given and what of its tree is kept. run is the
// sequence both share: the key, the cache, a staging folder, npm, native code, the layer.
type job struct {
	kind string // the cache's folder ("deps", "global") and the key's kind
	// what names the install in messages: "the dependencies of default.echo",
	// "npm i -g semver@7.6.3"
	what string
	// key holds the job's own inputs; run adds the install's (platform, runner, npm's
	// configuration) and its npmrc.
	key       *keyHash
	npmrc     string
	cacheable bool
	// stage writes what npm reads into the staging folder and returns where npm runs and its
	// arguments besides the install's own.
	stage func(staging string) (dir string, args []string, err error)
	// failed says what a failed npm run means when the job knows better (an out-of-sync
	// lockfile); nil otherwise.
	failed func(out string) error
	// native is where the packages npm installed are looked at for native code, and the error
	// that names them.
	modules func(staging string) string
	native  func(natives []nativePackage) error
	// installDir is where npm installed in the staging folder, and target where that folder is
	// in the image: install scripts npm could not run on the runner run there inside the base
	// (WithBase). nil for installs that keep the refusal of native code.
	installDir func(staging string) string
	target     string
	// fill writes the layer from the staging folder.
	fill func(staging string, w *tarWriter) error
	// parts, when set, lay the staging folder out as several layers instead of fill's one
	// (DependencyLayers); a split key names them.
	parts func(staging string) ([]part, error)
}

// run runs the job: from the cache when its key is there, else npm in a staging folder, the
// layer written and kept under the key.
func (o *options) run(ctx context.Context, in *install, j job) (v1.Layer, error) {
	layers, err := o.runLayers(ctx, in, j)
	if err != nil {
		return nil, err
	}
	return layers[0], nil
}

// runLayers is run for a job whose tree may be several layers (job.parts).
func (o *options) runLayers(ctx context.Context, in *install, j job) ([]v1.Layer, error) {
	j.key.field("npmrc", stripAuth(j.npmrc))
	j.key.field("ignore scripts", fmt.Sprint(in.skipScripts()))
	in.key(j.key, o)
	inBase := o.base != nil && j.installDir != nil && in.skipScripts()
	if inBase {
		digest, err := o.base.ConfigName()
		if err != nil {
			return nil, fmt.Errorf("read the config digest of the base for %s: %w", in.platform, err)
		}
		j.key.field("scripts run in the base", digest.String())
	}
	k := j.key.String()
	if j.cacheable {
		if l := o.lookupAll(j.kind, k); l != nil {
			return l, nil
		}
	}
	staging, err := o.staging(j.kind)
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(staging)
	dir, args, err := j.stage(staging)
	if err != nil {
		return nil, err
	}
	if inBase {
		defer o.prefetchBase(ctx, dir)() // the base unpacks while npm installs
	}
	args = append(args, in.args(o, j.npmrc)...)
	out, err := o.runNpm(ctx, dir, args...)
	if w := warnings(out); len(w) > 0 {
		o.warn(fmt.Sprintf("npm for %s on %s:\n  %s", j.what, in.platform, strings.Join(w, "\n  ")))
	}
	if err != nil {
		if j.failed != nil {
			if known := j.failed(out); known != nil {
				return nil, known
			}
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("install %s for %s: %w", j.what, in.platform, err)
		}
		if why := unreachable(out); why != "" {
			return nil, fmt.Errorf("install %s for %s: %s", j.what, in.platform, why)
		}
		return nil, fmt.Errorf("install %s for %s: npm %s: %w\n%s", j.what, in.platform, args[0], err, indent(out))
	}
	ranInBase := false
	if inBase {
		if ranInBase, err = o.rebuildInBase(ctx, in, j.what, j.npmrc, j.modules(staging), j.installDir(staging), j.target); err != nil {
			return nil, err
		}
	}
	if !ranInBase && (in.foreign || in.otherNode) {
		natives, err := findNative(j.modules(staging), in)
		if err != nil {
			return nil, err
		}
		if len(natives) > 0 {
			return nil, j.native(natives)
		}
	}
	if !inBase && in.skipScripts() {
		if err := o.warnScriptsSkipped(in, j.what, j.modules(staging), j.installDir == nil); err != nil {
			return nil, err
		}
	}
	layers, err := o.writeJob(staging, j)
	if err != nil {
		return nil, fmt.Errorf("write the layer of %s for %s: %w", j.what, in.platform, err)
	}
	if j.cacheable {
		if err := o.keepAll(j.kind, k, layers); err != nil {
			return nil, fmt.Errorf("keep the layer of %s in the cache %s: %w", j.what, o.layersDir(), err)
		}
	}
	return asLayers(layers), nil
}
