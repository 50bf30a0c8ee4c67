package image

import (
	"archive/tar"
	"context"
	"fmt"
	"io"
	"runtime"
	"strings"
	"sync"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"golang.org/x/sync/errgroup"

	"github.com/toa-deploy/toa-deploy/internal/app/toa"
	"github.com/toa-deploy/toa-deploy/internal/fsys"
	"github.com/toa-deploy/toa-deploy/internal/registry"
	"github.com/toa-deploy/toa-deploy/layer"
	"github.com/toa-deploy/toa-deploy/layer/sandbox"
)

// PushOptions tune Push.
type PushOptions struct {
	// Registries reads the bases (through their mirrors) and, without a Destination, is where
	// the images go: the registry each image's reference names.
	Registries *registry.Registries
	// Destination is where the images go: NewRegistryDestination(Registries) when nil, or an
	// OCI layout (layout.Open, package internal/push/layout).
	Destination Destination
	Layers      Layers
	Jobs        int    // images built at once; 3 as Toa's, past which uploads contend for one uplink
	Libc        string // the bases' libc when the user gives it; found in their layers otherwise
	CacheDir    string // where what was learnt of a base (its libc) is kept
	// Epoch is the time of the images' configs and history; zero is layer.SourceDateEpoch's.
	Epoch  time.Time
	Events func(Event)
	// Attach, when set, attaches documents (SBOMs, provenance, signatures) to each image built,
	// before its tag is written. Images the destination already has are left as they are.
	Attach Attacher
}

// WithDefaults are the options with what is not set filled in, for Push and layout.Push alike;
// the Epoch, which only a build needs and whose reading may fail, Push fills in itself.
func (o PushOptions) WithDefaults() PushOptions {
	if o.Jobs <= 0 {
		o.Jobs = 3
	}
	if o.Events == nil {
		o.Events = func(Event) {}
	}
	if o.Destination == nil {
		o.Destination = NewRegistryDestination(o.Registries)
	}
	return o
}

// Event is a step of a push, for the progress display.
type Event struct {
	Image   string // "composition-front"
	Message string
}

// Result is what a push did, image by image.
type Result struct {
	Images []*Pushed
}

// Pushed is one image of the application after a push.
type Pushed struct {
	Name       string   `json:"name"`
	Repository string   `json:"repository"`
	Tag        string   `json:"tag"`
	Digest     string   `json:"digest"`
	Platforms  []string `json:"platforms"`
	Built      bool     `json:"built"`
	DepsBuilt  bool     `json:"dependenciesBuilt"`
	BytesSent  int64    `json:"bytesSent"`
	Requests   int64    `json:"requests"`
	// Copied is true when layout.Push sent the image from an OCI layout to a registry that
	// lacked it.
	Copied bool `json:"copied,omitempty"`
	// Attachments are what was attached to the image when it was built (PushOptions.Attach) or
	// pushed from a layout.
	Attachments []Attachment `json:"attachments,omitempty"`
}

// Reference is the image's reference pinned by digest.
func (p *Pushed) Reference() string { return p.Repository + "@" + p.Digest }

// Push probes every image of the plan with one HEAD, then builds and pushes what the registry
// lacks: a dependencies image only when its deps-<hash> tag is missing, and the sources over it.
// A tag is written last, once everything it points to is in the registry, so a failed push leaves
// no tag on an incomplete image and a rerun finishes the job.
func Push(ctx context.Context, app *toa.Application, plan *Plan, opts PushOptions) (*Result, error) {
	opts = opts.WithDefaults()
	if err := unresolved(plan); err != nil {
		return nil, err
	}
	if opts.Epoch.IsZero() {
		epoch, err := layer.SourceDateEpoch()
		if err != nil {
			return nil, err
		}
		opts.Epoch = epoch
	}
	digests, err := Probe(ctx, opts.Destination, plan)
	if err != nil {
		return nil, err
	}
	result := &Result{Images: make([]*Pushed, len(plan.images))}
	var missing []int
	for i, img := range plan.images {
		result.Images[i] = &Pushed{Name: img.Name, Repository: img.Repository, Tag: img.Tag, Platforms: img.Platforms,
			Digest: digests[img.Repository]}
		if result.Images[i].Digest == "" {
			missing = append(missing, i)
			continue
		}
		opts.Events(Event{img.Name, "exists " + img.Reference()})
	}
	b := &builder{app: app, opts: opts, created: v1.Time{Time: opts.Epoch}, libc: map[string]*libcLook{},
		deps: map[string]v1.ImageIndex{}}
	toBuild := make([]*Image, len(missing))
	for k, i := range missing {
		toBuild[k] = plan.images[i]
	}
	stopUnpacking, err := b.checkBases(ctx, toBuild)
	if err != nil {
		return nil, err
	}
	defer stopUnpacking()
	err = Parallel(ctx, len(missing), opts.Jobs, func(ctx context.Context, k int) error {
		i := missing[k]
		return b.build(ctx, plan.images[i], result.Images[i])
	})
	if err != nil {
		return nil, err
	}
	return result, nil
}

// unresolved says why the plan cannot be pushed: an image whose base could not be resolved, with
// the host, the mirror and every image that needed it.
func unresolved(plan *Plan) error {
	for _, img := range plan.images {
		if img.Tag != "" {
			continue
		}
		if img.base == nil || img.base.Err == nil {
			return fmt.Errorf("%s: %s", img.Name, img.Unresolved)
		}
		var names []string
		for _, other := range plan.images {
			if other.base == img.base {
				names = append(names, other.Name)
			}
		}
		return registry.Wrap(img.base.String(), "to resolve the base of "+strings.Join(names, ", "), img.base.Err)
	}
	return nil
}

// probeJobs is how many HEADs a probe has in flight at once.
const probeJobs = 16

// Probe asks the destination, with one HEAD per image for a registry, which images of the plan
// it has, and returns their digests by repository. Images whose tag is not known yet are not
// asked for.
func Probe(ctx context.Context, dest Destination, plan *Plan) (map[string]string, error) {
	digests := make([]string, len(plan.images))
	err := Parallel(ctx, len(plan.images), probeJobs, func(ctx context.Context, i int) error {
		img := plan.images[i]
		if img.Tag == "" {
			return nil
		}
		digest, err := dest.Digest(ctx, img.Reference())
		digests[i] = digest
		return err
	})
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for i, d := range digests {
		if d != "" {
			out[plan.images[i].Repository] = d
		}
	}
	return out, nil
}

// Digests are the pushed images' digests by repository.
func (r *Result) Digests() map[string]string {
	out := map[string]string{}
	for _, p := range r.Images {
		out[p.Repository] = p.Digest
	}
	return out
}

type builder struct {
	app     *toa.Application
	opts    PushOptions
	created v1.Time // of every config and history entry

	mu   sync.Mutex
	libc map[string]*libcLook     // base digest → its libc, looked for once
	deps map[string]v1.ImageIndex // deps reference → its index, nil where it is missing (depsIndex)
}

// libcLook is the look for one base's libc: each digest's once, by whoever asks first or by
// unpackBases, different digests at once (each reads its base's layers).
type libcLook struct {
	done chan struct{} // closed once libc and err are set
	libc string
	err  error
}

func (b *builder) build(ctx context.Context, img *Image, pushed *Pushed) error {
	if img.Service != nil {
		return b.buildService(ctx, img, pushed)
	}
	src := b.opts.Registries.Counted() // the base, read from its registry or its mirror
	var sent Sent
	defer func() {
		_, requests := src.Sent()
		pushed.BytesSent, pushed.Requests = sent.Bytes, sent.Requests+requests
	}()
	deps, err := b.dependencies(ctx, src, img, pushed, &sent)
	if err != nil {
		return err
	}
	groupsOf := groups(img.Components, b.sourceLayerBudget(deps))
	var sources []v1.Layer
	for _, g := range groupsOf {
		l, err := b.opts.Layers.Sources(g)
		if err != nil {
			return fmt.Errorf("%s: write the sources: %w", img.Name, err)
		}
		sources = append(sources, l)
	}
	var images []v1.Image
	for i, d := range deps.images {
		platform := Platform(&deps.targets[i].Platform)
		out, err := sourcesImage(d, sources, command(img), b.created)
		if err != nil {
			return fmt.Errorf("%s for %s: %w", img.Name, platform, err)
		}
		// where this run read the base: the dependencies image may come from a run that read it
		// elsewhere, since the tags cover the base's digests and not its name
		if a := img.base.annotations(platform); a != nil {
			out = mutate.Annotations(out, a).(v1.Image)
		}
		if out, err = withoutLayerTimes(out); err != nil {
			return fmt.Errorf("%s for %s: %w", img.Name, platform, err)
		}
		images = append(images, out)
	}
	idx, err := index(images, deps.targets, img.base.annotations(""))
	if err != nil {
		return err
	}
	if err := b.attachAndUpload(ctx, img, idx, images, deps, pushed, &sent); err != nil {
		return err
	}
	return b.publish(ctx, img, idx, pushed, &sent)
}

// uploader is a destination that can put what an index holds by their digests, before the index
// goes under its tag (RegistryDestination): what is attached to it then goes up beside it.
type uploader interface {
	Upload(ctx context.Context, repository string, idx v1.ImageIndex) (Sent, error)
}

// attachAndUpload attaches the documents to an image just built and, where the destination can,
// sends the image by its digest at the same time: the referrers name digests, which exist before
// anything is sent, and only the tag (publish) must wait for both. A code change's attachments
// cost their own round trips beside the image's, not after them.
func (b *builder) attachAndUpload(ctx context.Context, img *Image, idx v1.ImageIndex, images []v1.Image, deps *depsImages, pushed *Pushed, sent *Sent) error {
	up, ok := b.opts.Destination.(uploader)
	if !ok || b.opts.Attach == nil {
		return b.attach(ctx, img, idx, images, deps.images, deps.targets, pushed, sent)
	}
	var attached, uploaded Sent
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return b.attach(gctx, img, idx, images, deps.images, deps.targets, pushed, &attached) })
	g.Go(func() error {
		s, err := up.Upload(gctx, img.Repository, idx)
		uploaded = s
		return err
	})
	err := g.Wait()
	sent.add(attached)
	sent.add(uploaded)
	return err
}

// publish writes an image's index under its tag, and records its digest.
func (b *builder) publish(ctx context.Context, img *Image, idx v1.ImageIndex, pushed *Pushed, sent *Sent) error {
	if err := CheckOCI(idx); err != nil {
		return fmt.Errorf("%s: toa-push made an image it must not write: %w", img.Reference(), err)
	}
	b.opts.Events(Event{img.Name, "pushing " + img.Reference()})
	s, err := b.opts.Destination.Write(ctx, img.Reference(), idx)
	sent.add(s)
	if err != nil {
		return err
	}
	digest, err := idx.Digest()
	if err != nil {
		return err
	}
	pushed.Digest, pushed.Built = digest.String(), true
	b.opts.Events(Event{img.Name, fmt.Sprintf("pushed %s@%s", img.Repository, digest)})
	return nil
}

type depsImages struct {
	images      []v1.Image
	targets     []Target
	layers      int               // layers of the largest platform image
	annotations map[string]string // of the index: where the base was read
}

// dependencies returns the dependencies image of each platform: from the destination when its
// tag is there, else built on the base and written there.
func (b *builder) dependencies(ctx context.Context, src *registry.Registries, img *Image, pushed *Pushed, sent *Sent) (*depsImages, error) {
	idx, err := b.depsIndex(ctx, img)
	if err != nil {
		return nil, err
	}
	if idx != nil {
		b.opts.Events(Event{img.Name, "dependencies exist " + img.DepsReference()})
		return fromIndex(idx)
	}
	global, err := globalLines(b.app, img)
	if err != nil {
		return nil, err
	}
	out := &depsImages{annotations: img.base.annotations(""), images: make([]v1.Image, len(img.Platforms)),
		targets: make([]Target, len(img.Platforms))}
	// the platforms are built at once (npm on the runner, the scripts in each base, under QEMU for
	// a foreign CPU): the image takes the slowest platform's time, not the sum; each result has its
	// platform's place, so the index is the same whichever finishes first
	if err := b.allPlatforms(ctx, src, img, global, out); err != nil {
		return nil, err
	}
	for _, d := range out.images {
		if n, err := layerCount(d); err == nil && n > out.layers {
			out.layers = n
		}
	}
	idx, err = index(out.images, out.targets, out.annotations)
	if err != nil {
		return nil, err
	}
	if err := CheckOCI(idx); err != nil {
		return nil, fmt.Errorf("%s: toa-push made an image it must not write: %w", img.DepsReference(), err)
	}
	b.opts.Events(Event{img.Name, "pushing " + img.DepsReference()})
	s, err := b.opts.Destination.Write(ctx, img.DepsReference(), idx)
	sent.add(s)
	if err != nil {
		return nil, err
	}
	pushed.DepsBuilt = true
	return out, nil
}

// allPlatforms builds the dependencies image of each platform of img into out, at once. A
// platform that fails cancels the work of the platforms listed after it and lets those before it
// finish, so that the error returned is always the first listed platform's that failed of itself,
// whichever finished first.
func (b *builder) allPlatforms(ctx context.Context, src *registry.Registries, img *Image, global []string, out *depsImages) error {
	n := len(img.Platforms)
	works := make([]context.Context, n)
	cancels := make([]context.CancelFunc, n)
	for i := range works {
		works[i], cancels[i] = context.WithCancel(ctx)
		defer cancels[i]()
	}
	errs := make([]error, n)
	var g errgroup.Group
	g.SetLimit(platformJobs(n))
	for i := range n {
		g.Go(func() error {
			if works[i].Err() != nil {
				return nil // a platform before it failed
			}
			d, target, err := b.platformDependencies(ctx, works[i], src, img, global, img.Platforms[i])
			out.images[i], out.targets[i], errs[i] = d, target, err
			if err != nil {
				for _, cancel := range cancels[i+1:] {
					cancel()
				}
			}
			return nil
		})
	}
	_ = g.Wait() // the goroutines return nil: errs holds what failed
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return ctx.Err()
}

// platformJobs is how many platforms of one dependencies image are built at once: each is mostly
// one process (npm, or node under QEMU), so as many as the runner has CPUs, at least 2 (one
// waits on the registry or the disk while the other computes).
func platformJobs(platforms int) int {
	return min(platforms, max(2, runtime.GOMAXPROCS(0)))
}

// platformDependencies builds one platform's dependencies image on its base. The base is read
// with ctx, which outlives the build: the image reads the base's layers again when it is pushed;
// the work (npm, the scripts in the base) runs with work, cancelled when another platform fails.
func (b *builder) platformDependencies(ctx, work context.Context, src *registry.Registries, img *Image, global []string, platform string) (v1.Image, Target, error) {
	base, target, err := b.base(ctx, src, img, platform)
	if err != nil {
		return nil, Target{}, err
	}
	b.opts.Events(Event{img.Name, "installing dependencies for " + platform + " (" + target.Libc + ")"})
	d, err := dependencyImage(work, base, img, global, target, b.opts.Layers, b.created)
	if err != nil {
		return nil, Target{}, fmt.Errorf("%s: %w", img.Name, err)
	}
	if a := img.base.annotations(platform); a != nil {
		d = mutate.Annotations(d, a).(v1.Image)
	}
	if d, err = withoutLayerTimes(d); err != nil {
		return nil, Target{}, fmt.Errorf("%s: %w", img.Name, err)
	}
	return d, target, nil
}

// depsIndex reads the image's dependencies image by its tag, nil when the destination lacks
// it, once a push: the check of the bases (baseChecks) asks first where the build may work in a
// base, and the build takes its answer, one round trip where a HEAD and a GET were two.
func (b *builder) depsIndex(ctx context.Context, img *Image) (v1.ImageIndex, error) {
	ref := img.DepsReference()
	b.mu.Lock()
	idx, read := b.deps[ref]
	b.mu.Unlock()
	if read {
		return idx, nil
	}
	idx, err := b.opts.Destination.Index(ctx, ref)
	if err != nil {
		return nil, err
	}
	b.mu.Lock()
	b.deps[ref] = idx
	b.mu.Unlock()
	return idx, nil
}

// fromIndex reads the platforms' images of a dependencies image, their manifests and configs
// (which the build reads next), the platforms at once: two round trips, not two a platform.
func fromIndex(idx v1.ImageIndex) (*depsImages, error) {
	m, err := idx.IndexManifest()
	if err != nil {
		return nil, err
	}
	out := &depsImages{annotations: m.Annotations, images: make([]v1.Image, len(m.Manifests)),
		targets: make([]Target, len(m.Manifests))}
	var g errgroup.Group
	for i, d := range m.Manifests {
		if d.Platform == nil {
			return nil, fmt.Errorf("the dependencies image %s names no platform", d.Digest)
		}
		out.targets[i] = Target{Platform: *d.Platform}
		g.Go(func() error {
			img, err := dependenciesPlatform(idx, d)
			out.images[i] = img
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	for _, img := range out.images {
		if n, err := layerCount(img); err == nil && n > out.layers {
			out.layers = n
		}
	}
	return out, nil
}

// dependenciesPlatform reads one platform's image of a dependencies image: its manifest, as
// OCI's, and its config.
func dependenciesPlatform(idx v1.ImageIndex, d v1.Descriptor) (v1.Image, error) {
	img, err := idx.Image(d.Digest)
	if err != nil {
		return nil, err
	}
	// one written by an earlier toa-push may be a Docker manifest of OCI layers
	if img, err = asOCI(img, "the dependencies image "+d.Digest.String()); err != nil {
		return nil, err
	}
	if _, err := img.RawConfigFile(); err != nil {
		return nil, fmt.Errorf("read the config of the dependencies image %s: %w", d.Digest, err)
	}
	return img, nil
}

func layerCount(img v1.Image) (int, error) {
	m, err := img.Manifest()
	if err != nil {
		return 0, err
	}
	return len(m.Layers), nil
}

// sourceLayerBudget is how many sources layers fit under maxLayers over the dependencies image.
func (b *builder) sourceLayerBudget(deps *depsImages) int {
	n := maxLayers - deps.layers
	if n < 1 {
		return 1
	}
	return n
}

// base reads the base image of one platform, from where it was resolved (its mirror, if it has
// one), and what the install must know of it, its libc too. Its layers are read only when the
// destination lacks them.
func (b *builder) base(ctx context.Context, reg *registry.Registries, img *Image, platform string) (v1.Image, Target, error) {
	target, digest, err := b.readBase(ctx, reg, img, platform)
	if err != nil {
		return nil, Target{}, err
	}
	if target.Libc, err = b.libcOf(ctx, target, digest, layer.BaseWork{}); err != nil {
		return nil, Target{}, fmt.Errorf("look for the libc of the base %s for %s: %w", img.Base, platform, err)
	}
	return target.Base, target, nil
}

// readBase reads the manifest and config of the base of one platform: the target without its
// libc, and the manifest's digest.
func (b *builder) readBase(ctx context.Context, reg *registry.Registries, img *Image, platform string) (Target, string, error) {
	resolved, err := reg.Reference(img.base.Source)
	if err != nil {
		return Target{}, "", err
	}
	digest := img.base.Platforms[platform]
	ref := resolved.Context().Digest(digest)
	need := fmt.Sprintf("to build the dependencies of %s for %s", img.Name, platform)
	base, err := reg.Image(ctx, ref)
	if err != nil {
		return Target{}, "", registry.Wrap(img.base.String(), need, err)
	}
	if base, err = baseAsOCI(base, fmt.Sprintf("%s for %s", img.base, platform)); err != nil {
		return Target{}, "", err
	}
	cfg, err := base.ConfigFile()
	if err != nil {
		return Target{}, "", registry.Wrap("the config of "+img.base.String(), need, err)
	}
	p := *cfg.Platform()
	if p.Variant == "" { // a config may leave it out; the base's index said which it is
		if parsed, err := v1.ParsePlatform(platform); err == nil && parsed.Architecture == p.Architecture {
			p.Variant = parsed.Variant
		}
	}
	return Target{Platform: p, NodeVersion: envOf(cfg, "NODE_VERSION"), Base: base}, digest, nil
}

// libcOf finds the base's libc once per digest: musl when it holds musl's loader
// (layer.IsMuslLoader), else glibc. work is what the build will do in that base as far as it is
// known (checkBases), the zero BaseWork where it is not: a base that the work will unpack anyway
// says its libc from what was unpacked. A digest that another caller, or unpackBases, is looking
// at is waited for. The answer is kept under the cache dir: a digest never changes.
func (b *builder) libcOf(ctx context.Context, t Target, digest string, work layer.BaseWork) (string, error) {
	if b.opts.Libc != "" {
		return b.opts.Libc, nil
	}
	if b.claimLibc(digest) {
		b.learnLibc(ctx, t, digest, work)
	}
	b.mu.Lock()
	look := b.libc[digest]
	b.mu.Unlock()
	select {
	case <-look.done:
		return look.libc, look.err
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

// claimLibc says whether the caller is the first to ask for the libc of digest, and must then
// learn it (learnLibc); the others wait for it.
func (b *builder) claimLibc(digest string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.libc[digest] != nil {
		return false
	}
	b.libc[digest] = &libcLook{done: make(chan struct{})}
	return true
}

// learnLibc looks for the libc of the digest claimed (claimLibc) and tells those waiting.
func (b *builder) learnLibc(ctx context.Context, t Target, digest string, work layer.BaseWork) {
	b.mu.Lock()
	look := b.libc[digest]
	b.mu.Unlock()
	look.libc, look.err = b.lookForLibc(ctx, t, digest, work)
	close(look.done)
}

// baseUnpacker is Layers that unpack a base for the work in it when that work runs there
// whatever the base's libc, and say the libc from what they unpacked (layer.UnpackBase).
type baseUnpacker interface {
	UnpackBase(ctx context.Context, work layer.BaseWork, t Target) (libc string, ok bool, err error)
}

// lookForLibc reads the libc kept in the cache for the digest; else, where the work will unpack
// the base whatever its libc, unpacks it now and reads the libc there: one pass over the base's
// layers instead of two (seconds each for a base of hundreds of MB); else looks in its layers.
func (b *builder) lookForLibc(ctx context.Context, t Target, digest string, work layer.BaseWork) (string, error) {
	cache := ""
	if b.opts.CacheDir != "" {
		cache = fsys.Libc.Path(b.opts.CacheDir, strings.ReplaceAll(digest, ":", "-"))
		// a file that says neither (one an older toa-push wrote half) is looked again
		if data, ok := fsys.Libc.Read(cache); ok && (string(data) == "glibc" || string(data) == "musl") {
			return string(data), nil
		}
	}
	libc, ok, err := "", false, error(nil)
	if unpacker, can := b.opts.Layers.(baseUnpacker); can && (len(work.Shell) > 0 || len(work.Scripts) > 0) {
		libc, ok, err = unpacker.UnpackBase(ctx, work, t)
		if err != nil {
			return "", err
		}
	}
	if !ok {
		if libc, err = findLibc(ctx, t.Base); err != nil {
			return "", err
		}
	}
	if cache != "" {
		_ = fsys.WriteFile(cache, []byte(libc), 0o644) // a cache: losing it costs a second look
	}
	return libc, nil
}

// findLibc looks through the base's layers, the lowest first, for musl's loader where
// layer.UnpackBase looks for it in an unpacked root, so that both say the same of one base. What
// it found is believed only once each layer it read was read to its end and checked against its
// digest and the diff ID the base's config names (sandbox.EachLayer): neither a registry that
// served other bytes nor a base whose layers are not those of its config decides the libc kept
// in the cache.
func findLibc(ctx context.Context, img v1.Image) (string, error) {
	libc := "glibc"
	err := sandbox.EachLayer(ctx, img, func(_ int, tr *tar.Reader) error {
		for {
			h, err := tr.Next()
			if err == io.EOF {
				return nil
			}
			if err != nil {
				return err
			}
			if layer.IsMuslLoader(h.Name) {
				libc = "musl"
				return sandbox.ErrSkipRest
			}
		}
	})
	if err != nil {
		return "", err
	}
	return libc, nil
}

// globalLines are the `npm i -g` lines of registry.build.run and the components' build.run.
func globalLines(app *toa.Application, img *Image) ([]string, error) {
	var lines []string
	for _, run := range []string{app.Registry.Build.Run, img.Run} {
		for _, line := range strings.Split(run, "\n") {
			if line = strings.TrimSpace(line); line != "" {
				lines = append(lines, line)
			}
		}
	}
	return lines, nil
}

// Parallel runs f for 0..n-1, at most jobs at once, and returns the first error: the others see
// their ctx cancelled, and none starts after it. Push runs its builds and probes with it, and
// layout.Push its copies.
func Parallel(ctx context.Context, n, jobs int, f func(context.Context, int) error) error {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(jobs)
	for i := 0; i < n && gctx.Err() == nil; i++ {
		g.Go(func() error { return f(gctx, i) })
	}
	if err := g.Wait(); err != nil {
		return err
	}
	return ctx.Err()
}
