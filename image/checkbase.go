package image

import (
	"context"
	"fmt"

	"golang.org/x/sync/errgroup"

	"github.com/toa-deploy/toa-deploy/layer"
)

// baseChecker is Layers that can say, before anything is installed, what the runner lacks to
// do a platform's work inside its base (layer.CheckBase).
type baseChecker interface {
	CheckBase(ctx context.Context, work layer.BaseWork, t Target) error
}

// checkBases says what this runner lacks to build the images in their bases, before any of them
// is built and anything pushed: for each image to build whose dependencies image the destination
// lacks, each platform's build.run lines and the install scripts its components' lockfiles name
// (npm's global installs are known only once installed: they are checked then). The bases are
// read at once, as the builds read them: a base that the work will unpack is unpacked here.
func (b *builder) checkBases(ctx context.Context, images []*Image) error {
	checker, ok := b.opts.Layers.(baseChecker)
	if !ok {
		return nil
	}
	type check struct {
		img      *Image
		work     layer.BaseWork
		platform string
		target   Target
	}
	var checks []*check
	for _, img := range images {
		work, err := baseWork(b, img)
		if err != nil {
			return err
		}
		if len(work.Shell) == 0 && len(work.Scripts) == 0 {
			continue
		}
		digest, err := b.opts.Destination.Digest(ctx, img.DepsReference())
		if err != nil {
			return err
		}
		if digest != "" {
			continue // nothing runs in a base when the dependencies image is there
		}
		for _, platform := range img.Platforms {
			checks = append(checks, &check{img: img, work: work, platform: platform})
		}
	}
	// each read to its end, so that the error said is the first listed, whichever came first
	errs := make([]error, len(checks))
	var g errgroup.Group
	g.SetLimit(platformJobs(len(checks)))
	for i, c := range checks {
		g.Go(func() error {
			_, c.target, errs[i] = b.base(ctx, b.opts.Registries, c.img, c.platform, c.work)
			return nil
		})
	}
	_ = g.Wait()
	for i, c := range checks {
		if errs[i] != nil {
			return errs[i]
		}
		if err := checker.CheckBase(ctx, c.work, c.target); err != nil {
			return fmt.Errorf("%s: %w", c.img.Name, err)
		}
	}
	return nil
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
	_, work.Shell = layer.SplitLines(lines)
	for _, c := range img.Components {
		names, err := layer.LockedScripts(c)
		if err != nil {
			return work, fmt.Errorf("%s: %w", img.Name, err)
		}
		work.Scripts = append(work.Scripts, names...)
	}
	return work, nil
}
