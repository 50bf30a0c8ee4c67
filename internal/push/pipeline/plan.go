package pipeline

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"
	"sigs.k8s.io/kustomize/api/types"

	"github.com/toa-deploy/toa-deploy/internal/app/extension"
	"github.com/toa-deploy/toa-deploy/internal/app/toa"
	"github.com/toa-deploy/toa-deploy/internal/fault"
	"github.com/toa-deploy/toa-deploy/internal/fsys"
	"github.com/toa-deploy/toa-deploy/internal/push/image"
	"github.com/toa-deploy/toa-deploy/internal/push/layout"
	"github.com/toa-deploy/toa-deploy/internal/registry"
	"github.com/toa-deploy/toa-deploy/layer"
	"github.com/toa-deploy/toa-deploy/manifest"
)

// Planned is an application made ready to push: what it is, every image a push of it makes, and
// its Kubernetes objects, made once.
type Planned struct {
	App     *toa.Application
	Plan    *image.Plan
	Objects []manifest.Object
	// Warnings are the application's, its sources' (files that usually hold secrets) and the
	// plan's, in that order.
	Warnings []string

	toolchain layer.Toolchain
	runner    *layer.Runner // nil when WithToolchain gave the versions
	epoch     time.Time
	bases     map[string]*image.Base
	cacheDir  string
	holds     *fsys.Holds // the unpacked bases Push uses (nil: none held)
}

// resolveJobs is how many bases are resolved at once.
const resolveJobs = 8

// prepare is every stage before the build: load, extensions, bases, plan, objects. Toa's
// refusals (ports, ingress, resources, the services a composition lists) come out of it, before
// anything is printed, built or pushed.
func prepare(ctx context.Context, path, env string, o *options) (*Planned, error) {
	epoch, err := layer.SourceDateEpoch()
	if err != nil {
		return nil, err
	}
	app, err := toa.Load(path, env)
	if err != nil {
		return nil, err
	}
	warnings, err := secrets(app)
	if err != nil {
		return nil, err
	}
	warnings = append(slices.Clone(app.Warnings), warnings...)
	for _, w := range warnings {
		o.warn(w)
	}
	if err := image.Check(app, o.mono); err != nil {
		return nil, err
	}
	deps, err := dependencies(ctx, app, o)
	if err != nil {
		return nil, err
	}
	runner, tools, err := toolchain(ctx, o)
	if err != nil {
		return nil, err
	}
	spec := image.PlanOptions{Mono: o.mono, Toolchain: tools, Services: serviceImages(manifest.ServiceImages(app, deps, o.mono)),
		Compression: o.compression, ScriptsOnRunner: o.scriptsOnRunner}
	if spec.Bases, err = resolveBases(ctx, app, spec, o); err != nil {
		return nil, err
	}
	plan, err := image.NewPlan(app, spec)
	if err != nil {
		return nil, err
	}
	for _, w := range plan.Warnings() {
		o.warn(w)
	}
	objects, err := manifest.Objects(app, workloadImages(plan, o.mono), manifest.WithDependencies(deps))
	if err != nil {
		return nil, err
	}
	return &Planned{App: app, Plan: plan, Objects: objects, toolchain: tools, runner: runner, epoch: epoch,
		bases: spec.Bases, cacheDir: o.cacheDir,
		Warnings: append(warnings, plan.Warnings()...)}, nil
}

// secrets are the warnings for files that usually hold secrets in the components' sources: said
// by every run, --plan included, and before anything is built.
func secrets(app *toa.Application) ([]string, error) {
	var out []string
	for _, c := range app.Components {
		w, err := layer.Secrets(c)
		if err != nil {
			return nil, fmt.Errorf("read the sources of %s: %w", c.Locator.ID, err)
		}
		if w != "" {
			out = append(out, w)
		}
	}
	return out, nil
}

// dependencies asks the extensions and connectors installed under the context's node_modules
// what they deploy, or takes an earlier run's answers from the cache.
func dependencies(ctx context.Context, app *toa.Application, o *options) (*manifest.Dependencies, error) {
	opts := []extension.Option{extension.WithCache(o.cacheDir)}
	if o.extensionOut != nil {
		opts = append(opts, extension.WithOutput(o.extensionOut))
	}
	o.log.Debug("asking the extensions what they deploy")
	res, err := extension.Resolve(ctx, app, opts...)
	if err != nil {
		return nil, err
	}
	for _, d := range res.Dependencies {
		o.log.Debugf("%s %s from %s", d.Reference, d.Version, d.Dir)
	}
	if res.Started == 0 {
		o.log.Debug("the extensions' answers are the cache's: nothing they read has changed")
	}
	for _, w := range res.Warnings {
		o.warn(w)
	}
	return manifest.Merge(res), nil
}

// toolchain is WithToolchain's versions, else the runner's as node and npm say, asked once and
// kept in the cache while node's binary is the same file.
func toolchain(ctx context.Context, o *options) (*layer.Runner, layer.Toolchain, error) {
	if o.toolchain != nil {
		return nil, *o.toolchain, nil
	}
	r, err := layer.DetectRunnerCached(ctx, o.cacheDir)
	if err != nil {
		return nil, layer.Toolchain{}, err
	}
	return r, r.Toolchain, nil
}

// serviceImages are the images of the extension services the application builds.
func serviceImages(services []*manifest.Service) []image.Service {
	out := make([]image.Service, 0, len(services))
	for _, s := range services {
		out = append(out, image.Service{Name: s.ObjectName(), Reference: s.Reference, Dir: s.Dir, Version: s.Version})
	}
	return out
}

// workloadImages hand the plan's images to manifest, typed: each one's workload (a composition's,
// mono's, an extension service's), its name as the plan gave it, and what its container names:
// the repository and its tag, or the repository alone while the tag is not known (the
// kustomization then pins it).
func workloadImages(plan *image.Plan, mono bool) manifest.Images {
	out := manifest.Images{Mono: mono}
	for _, img := range plan.Images() {
		w := manifest.Image{Kind: manifest.KindMono, Name: img.Name, Reference: img.Reference()}
		if w.Reference == "" {
			w.Reference = img.Repository
		}
		switch {
		case img.Composition != nil:
			w.Kind, w.Composition = manifest.KindComposition, img.Composition.Name
		case img.Service != nil:
			w.Kind = manifest.KindService
		}
		out.List = append(out.List, w)
	}
	return out
}

// resolveBases resolves every base of the plan once, a few at once, each within the resolve
// timeout, and keeps each answer in the cache. A base that cannot be resolved keeps its error:
// the plan says so, and a push refuses. A plan (Plan) takes instead what the base was last
// resolved to, with a warning that says how old that is.
func resolveBases(ctx context.Context, app *toa.Application, spec image.PlanOptions, o *options) (map[string]*image.Base, error) {
	refs, err := image.Bases(app, spec)
	if err != nil {
		return nil, err
	}
	bases := make([]*image.Base, len(refs))
	var g errgroup.Group
	g.SetLimit(resolveJobs)
	for i, ref := range refs {
		g.Go(func() error {
			rctx, cancel := context.WithTimeout(ctx, o.resolveTimeout)
			defer cancel()
			bases[i] = image.ResolveBase(rctx, o.registries, ref)
			return nil
		})
	}
	_ = g.Wait() // a base's error stays in its Base
	cache := image.NewBaseCache(o.cacheDir)
	out := make(map[string]*image.Base, len(refs))
	for i, ref := range refs {
		out[ref] = bases[i]
		if b := bases[i]; b.Err == nil {
			if err := cache.Store(b, o.now()); err != nil {
				o.log.Debugf("keep %s in the cache: %v", b, err)
			}
			continue
		}
		// Only a base whose registry gave no answer is planned from the cache: one it answered
		// about (not found, refused) has changed, and the plan fails with what it said.
		if !o.planning || !registry.OutOfReach(bases[i].Err) {
			continue
		}
		cached, when := cache.Load(ref)
		if cached == nil {
			continue
		}
		cached.Source, cached.Mirror = bases[i].Source, bases[i].Mirror
		o.warn(fmt.Sprintf("%v; planned from its digests as they were %s ago (kept in %s): its tag may have moved since",
			registry.Wrap(bases[i].String(), "", bases[i].Err), age(o.now().Sub(when)), cache.Dir()))
		out[ref] = cached
	}
	return out, nil
}

// age says how long ago, in the largest unit that fits.
func age(d time.Duration) string {
	unit := func(n int, name string) string {
		if n == 1 {
			return "1 " + name
		}
		return fmt.Sprintf("%d %ss", n, name)
	}
	switch {
	case d < time.Minute:
		return unit(int(d.Seconds()), "second")
	case d < time.Hour:
		return unit(int(d.Minutes()), "minute")
	case d < 48*time.Hour:
		return unit(int(d.Hours()), "hour")
	}
	return unit(int(d.Hours()/24), "day")
}

// pins are the kustomization's images entries: every image of the plan by the digest the
// destination has, else by its tag. An image with neither is not written down (its containers
// would run whatever the registry calls latest): the error is a *NotWrittenError.
func pins(p *Planned, digests map[string]string) ([]types.Image, error) {
	images := p.Plan.Images()
	out := make([]types.Image, 0, len(images))
	for _, img := range images {
		digest := digests[img.Repository]
		if digest == "" && img.Tag == "" {
			e := &NotWrittenError{Why: fmt.Sprintf("the tag of %s is not known: %s", img.Name, img.Unresolved)}
			if b := p.bases[img.Base]; b != nil && b.Err != nil {
				e.Why = fmt.Sprintf("the tag of %s is not known", img.Name)
				e.Err = registry.Wrap(b.String(), "to plan the tag of "+img.Name, b.Err)
				if registry.OutOfReach(b.Err) {
					e.Hint = fmt.Sprintf("a plan that reaches it keeps its digests in the cache (%s), and a later plan without it plans from them", image.NewBaseCache(p.cacheDir).Dir())
				}
			}
			return nil, e
		}
		out = append(out, types.Image{Name: img.Repository, Digest: digest, NewTag: img.Tag})
	}
	return out, nil
}

// writeKustomization writes the objects and the images' pins into dir.
func writeKustomization(p *Planned, dir string, digests map[string]string) error {
	objects, err := manifest.MarshalObjects(p.Objects)
	if err != nil {
		return err
	}
	return writeObjects(p, objects, dir, digests)
}

// writeObjects writes the objects' files, marshalled before, and the images' pins into dir.
func writeObjects(p *Planned, objects *manifest.ObjectFiles, dir string, digests map[string]string) error {
	images, err := pins(p, digests)
	if err != nil {
		return err
	}
	files, err := objects.Kustomization(images, p.App.Name)
	if err != nil {
		return err
	}
	return manifest.WriteKustomization(dir, files)
}

// marshalled is the objects' files, marshalled in a goroutine of their own.
type marshalled struct {
	done    chan struct{}
	objects *manifest.ObjectFiles
	err     error
}

// marshalObjects marshals the objects while the images are pushed: their files name the images
// by repository alone (kustomization.yaml pins them), and a push is mostly waiting for the
// registry.
func marshalObjects(objects []manifest.Object) *marshalled {
	m := &marshalled{done: make(chan struct{})}
	go func() {
		defer close(m.done)
		m.objects, m.err = manifest.MarshalObjects(objects)
	}()
	return m
}

func (m *marshalled) wait() (*manifest.ObjectFiles, error) {
	<-m.done
	return m.objects, m.err
}

// NotWrittenError says why the kustomization was not written: a tag is not known, because a base
// could not be resolved. Its class is its cause's: a registry that refused is a failure, one
// that did not answer in time a timeout.
type NotWrittenError struct {
	Why  string
	Err  error  // the cause: the base's registry error
	Hint string // what to do
}

func (e *NotWrittenError) Error() string {
	s := "the kustomization is not written: " + e.Why
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	if e.Hint != "" {
		s += "\n  " + e.Hint
	}
	return s
}

func (e *NotWrittenError) Unwrap() error { return e.Err }

// checkOutputs refuses, before any work, the output folders that would be refused after it:
// a kustomization folder holding what toa-push did not write, an OCI layout folder holding
// anything but a layout.
func checkOutputs(o *options) error {
	if err := manifest.CheckKustomizationDir(o.kustomizationDir()); err != nil {
		return err
	}
	if o.ociLayout == "" {
		return nil
	}
	var beside []string // the kustomization's folder, where it is written inside the layout's
	dir, errL := filepath.Abs(o.ociLayout)
	k, errK := filepath.Abs(o.kustomizationDir())
	if rel, err := filepath.Rel(dir, k); errL == nil && errK == nil && err == nil && rel != "." && !strings.HasPrefix(rel, "..") {
		beside = append(beside, strings.Split(rel, string(filepath.Separator))[0])
	}
	if err := layout.CheckDir(o.ociLayout, beside...); err != nil {
		return err
	}
	if entries, err := os.ReadDir(o.ociLayout); err != nil || len(entries) == 0 {
		return nil // made by layout.Open, which says why it cannot be
	}
	if _, err := layout.Read(o.ociLayout); err != nil {
		return &fault.Input{File: o.ociLayout, Message: "is an OCI image layout toa-push cannot read: " + err.Error(), Err: err,
			Hint: "give --oci-layout a folder of its own, or an OCI layout toa-push wrote"}
	}
	return nil
}
