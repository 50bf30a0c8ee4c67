package image

import (
	"context"
	"fmt"
	"runtime"
	"sort"

	"golang.org/x/sync/errgroup"

	"github.com/toa-deploy/toa-deploy/layer"
)

// baseChecker is Layers that can say, before anything is installed, what the runner lacks to
// do a platform's work inside its base (layer.CheckBase), and whether that work runs there
// whatever the base's libc (layer.InBaseWhateverLibc).
type baseChecker interface {
	CheckBase(ctx context.Context, work layer.BaseWork, t Target) error
	CheckRunner(ctx context.Context, work layer.BaseWork, t Target) error
	InBaseWhateverLibc(ctx context.Context, work layer.BaseWork, t Target) (bool, error)
}

// baseCheck is one platform of one image to build, and what its build will do in its base.
type baseCheck struct {
	img      *Image
	work     layer.BaseWork
	platform string
	digest   string // of the base's manifest for the platform
	target   Target // its Libc empty until known where whateverLibc
	// whateverLibc: the work runs in the base whatever its libc, so the base is unpacked and
	// its libc read there (unpackBases), never looked for in its layers first
	whateverLibc bool
}

// checkBases says what this runner lacks to build the images in their bases, before any of them
// is built and anything pushed: for each image to build whose dependencies image the destination
// lacks, each platform's build.run lines and the install scripts its components' lockfiles name
// (npm's global installs are known only once installed: they are checked then). The emulator and
// user namespaces are checked before any base is read whole. Then the bases that the work will
// unpack whatever their libc start unpacking in the background (unpackBases), and a build waits
// only for its own base: the emulated platform's, whose work is the longest, is unpacked first.
// build.run lines wait here for their base, whose /bin/sh they need. stop cancels the unpacking
// that is left and waits for it; it is never nil.
func (b *builder) checkBases(ctx context.Context, images []*Image) (stop func(), err error) {
	stop = func() {}
	checker, ok := b.opts.Layers.(baseChecker)
	if !ok {
		return stop, nil
	}
	checks, err := b.baseChecks(ctx, images)
	if err != nil {
		return stop, err
	}
	// each base's manifest and config read at once; a base whose libc decides whether the work
	// runs in it is looked through for it. Every one to its end, so that the error said is the
	// first listed, whichever came first.
	errs := make([]error, len(checks))
	var g errgroup.Group
	g.SetLimit(platformJobs(len(checks)))
	for i, c := range checks {
		g.Go(func() error {
			errs[i] = b.prepareCheck(ctx, checker, c)
			return nil
		})
	}
	_ = g.Wait()
	for i, c := range checks {
		if errs[i] != nil {
			return stop, errs[i]
		}
		if c.whateverLibc {
			err = checker.CheckRunner(ctx, c.work, c.target)
		} else {
			err = checker.CheckBase(ctx, c.work, c.target)
		}
		if err != nil {
			return stop, fmt.Errorf("%s: %w", c.img.Name, err)
		}
	}
	stop = b.unpackBases(ctx, checks)
	for _, c := range checks {
		if !c.whateverLibc || len(c.work.Shell) == 0 {
			continue
		}
		if c.target.Libc, err = b.libcOf(ctx, c.target, c.digest, c.work); err != nil {
			stop()
			return func() {}, fmt.Errorf("look for the libc of the base %s for %s: %w", c.img.Base, c.platform, err)
		}
		if err := checker.CheckBase(ctx, c.work, c.target); err != nil {
			stop()
			return func() {}, fmt.Errorf("%s: %w", c.img.Name, err)
		}
	}
	return stop, nil
}

// baseChecks are the platforms of the images whose build may work in their bases: those with
// build.run lines or locked install scripts, whose dependencies image the destination lacks.
func (b *builder) baseChecks(ctx context.Context, images []*Image) ([]*baseCheck, error) {
	var checks []*baseCheck
	for _, img := range images {
		work, err := baseWork(b, img)
		if err != nil {
			return nil, err
		}
		if len(work.Shell) == 0 && len(work.Scripts) == 0 {
			continue
		}
		deps, err := b.depsIndex(ctx, img) // read whole: the build takes it from there
		if err != nil {
			return nil, err
		}
		if deps != nil {
			continue // nothing runs in a base when the dependencies image is there
		}
		for _, platform := range img.Platforms {
			checks = append(checks, &baseCheck{img: img, work: work, platform: platform})
		}
	}
	return checks, nil
}

// prepareCheck reads the check's base (its manifest and config), asks whether the work runs in
// it whatever its libc, and where the libc decides, looks for it.
func (b *builder) prepareCheck(ctx context.Context, checker baseChecker, c *baseCheck) (err error) {
	if c.target, c.digest, err = b.readBase(ctx, b.opts.Registries, c.img, c.platform); err != nil {
		return err
	}
	if c.whateverLibc, err = checker.InBaseWhateverLibc(ctx, c.work, c.target); err != nil || c.whateverLibc {
		return err
	}
	if c.target.Libc, err = b.libcOf(ctx, c.target, c.digest, layer.BaseWork{}); err != nil {
		return fmt.Errorf("look for the libc of the base %s for %s: %w", c.img.Base, c.platform, err)
	}
	return nil
}

// unpackBases unpacks, in the background, the bases that the checks' work runs in whatever
// their libc, each once, and learns their libc there (libcOf, which a build asking for it waits
// on). Those of a CPU the runner emulates go first: the work in them is the longest, and it
// waits only for its own base. An unpack keeps two cores busy (decompression, writes), so they
// go one at a time on a runner of two or three: the first base is ready in half the time two
// at once would take. stop cancels what is left and waits for it: no root is left half-written
// (sandbox.Unpack keeps a root only whole).
func (b *builder) unpackBases(ctx context.Context, checks []*baseCheck) (stop func()) {
	if b.opts.Libc != "" {
		return func() {} // the libc is known: the bases unpack when their work needs them
	}
	var queue []*baseCheck
	for _, c := range unpackOrder(checks, runtime.GOARCH) {
		if b.claimLibc(c.digest) {
			queue = append(queue, c)
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		var g errgroup.Group
		g.SetLimit(max(1, runtime.GOMAXPROCS(0)/2))
		for _, c := range queue {
			g.Go(func() error {
				b.learnLibc(ctx, c.target, c.digest, c.work)
				return nil
			})
		}
		_ = g.Wait()
	}()
	return func() {
		cancel()
		<-done
	}
}

// unpackOrder is the checks whose work runs in their base whatever its libc, those of a CPU that
// is not the runner's (arch, GOARCH's names) first, each base once, otherwise in their order.
func unpackOrder(checks []*baseCheck, arch string) []*baseCheck {
	var out []*baseCheck
	seen := map[string]bool{}
	for _, c := range checks {
		if c.whateverLibc && !seen[c.digest] {
			seen[c.digest] = true
			out = append(out, c)
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		return out[i].target.Platform.Architecture != arch && out[j].target.Platform.Architecture == arch
	})
	return out
}

// baseWork is what the image's build may do in a base: its build.run lines that are not npm's,
// and the install scripts its components' lockfiles name.
func baseWork(b *builder, img *Image) (layer.BaseWork, error) {
	var work layer.BaseWork
	if img.Service != nil {
		return work, nil
	}
	lines, err := globalLines(b.app, img)
	if err != nil {
		return work, err
	}
	work.Steps = layer.Steps(lines)
	work.Shell = layer.ShellLines(work.Steps)
	work.Components = img.Components
	for _, c := range img.Components {
		names, err := layer.LockedScripts(c)
		if err != nil {
			return work, fmt.Errorf("%s: %w", img.Name, err)
		}
		work.Scripts = append(work.Scripts, names...)
	}
	return work, nil
}
