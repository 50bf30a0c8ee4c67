package layer

import (
	"context"
	"fmt"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/toa-deploy/toa-deploy/internal/fsys"
	"github.com/toa-deploy/toa-deploy/layer/sandbox"
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
	// installBinds are what is bound in the base for the scripts: the installed packages at
	// their place in the image (a component's node_modules and its package files; Global's
	// packages, each at its place in the base's global prefix)
	installBinds func(staging string) []sandbox.Bind
	// scripted: the install may have scripts to run in the base (a lockfile that says so, or
	// none to say): its layer's key then holds the layers of the base they run on
	scripted bool
	// fill writes the layer from the staging folder.
	fill func(staging string, w *tarWriter) error
	// parts, when set, lay the staging folder out as several layers instead of fill's one
	// (DependencyLayers); a split key names them.
	parts func(staging string) ([]part, error)
	// tree, when set, lets a changed lockfile be installed over the tree the install before it
	// kept (tree.go); nil for installs always made anew.
	tree *treeSpec
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
	if inBase && j.scripted {
		// the scripts run on top of the base and of what build.run made there: its layers'
		// digests, never a name or a config a hostile base could share with another
		chain, err := sandbox.ChainID(o.base)
		if err != nil {
			return nil, fmt.Errorf("read the layers of the base for %s: %w", in.platform, err)
		}
		j.key.field("scripts run in the base", chain.String())
		o.envKey(j.key, o.npmConfig)
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
	defer fsys.RemoveAll(staging)
	dir, args, err := j.stage(staging)
	if err != nil {
		return nil, err
	}
	if inBase && j.scripted {
		defer o.prefetchBase(ctx)() // the base unpacks while npm installs
	}
	args = append(args, in.args(o, j.npmrc)...)
	treeKey := j.key.withoutContent()
	changed, out, reused := o.installOverKept(ctx, j, treeKey, staging, dir, args)
	if !reused {
		out, err = o.runNpm(ctx, dir, args...)
	}
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
	if err := refuseGitPrepare(j.modules(staging), j.what); err != nil {
		return nil, err
	}
	ranInBase := false
	if inBase {
		if ranInBase, err = o.scriptsInBase(ctx, in, j, staging, changed, reused); err != nil {
			return nil, err
		}
	}
	if !ranInBase && in.skipScripts() {
		natives, err := findNative(j.modules(staging), in)
		if err != nil {
			return nil, err
		}
		if len(natives) > 0 {
			return nil, j.native(natives)
		}
	}
	if !inBase && in.skipScripts() {
		if err := o.warnScriptsSkipped(in, j.what, j.modules(staging)); err != nil {
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
		o.keepTreeOf(j, treeKey, staging)
	}
	return asLayers(layers), nil
}

// installOverKept installs a changed lockfile over the tree the job's last install kept, when
// there is one (tree.go). reused is false when there is none, or when npm's result over it is
// not what npm ci would make: modules is then absent, for npm ci.
func (o *options) installOverKept(ctx context.Context, j job, treeKey, staging, dir string, args []string) (changed map[string]bool, out string, reused bool) {
	if !keepsTrees || j.tree == nil || !j.cacheable || len(args) == 0 || args[0] != "ci" {
		return nil, "", false
	}
	kept := o.takeTree(treeKey, staging, j.modules(staging))
	if kept == nil {
		return nil, "", false
	}
	return o.installOver(ctx, kept, j.tree, dir, j.modules(staging), args)
}

// scriptsInBase runs in the base the install scripts npm skipped: every package's for a tree
// installed anew, only those of the packages npm added or changed over a kept tree, whose other
// packages' scripts ran in the same base when it was installed.
func (o *options) scriptsInBase(ctx context.Context, in *install, j job, staging string, changed map[string]bool, reused bool) (bool, error) {
	modules := j.modules(staging)
	ran, err := o.rebuildInBase(ctx, in, j.what, j.npmrc, modules, j.installDir(staging), j.target, onlyPaths(changed), j.installBinds(staging))
	if err != nil || ran || !reused {
		return ran, err
	}
	return scriptsRanBefore(modules, changed)
}

// keepTreeOf keeps the job's installed tree for the next change of its lockfile. A tree that
// cannot be kept costs the next install its speed, not its result: it is only said.
func (o *options) keepTreeOf(j job, treeKey, staging string) {
	if !keepsTrees || j.tree == nil {
		return
	}
	if err := o.keepTree(treeKey, staging, j.modules(staging)); err != nil {
		o.warn(fmt.Sprintf("keep the node_modules of %s in the cache %s for the next install: %v", j.what, fsys.Trees.Dir(o.cacheRoot), err))
	}
}
