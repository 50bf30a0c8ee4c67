package layer

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/toa-deploy/toa-deploy/internal/app/lockfile"
	"github.com/toa-deploy/toa-deploy/internal/app/toa"
	"github.com/toa-deploy/toa-deploy/layer/sandbox"
)

// BaseWork is what the build of a platform will do inside its base, as it is known before
// anything is installed.
type BaseWork struct {
	Shell []string // build.run lines that run in the base (ShellLines of Steps)
	// Steps are build.run's steps in order, and Components the image's components, whose
	// package files the lines see: what the cache key of the lines' layer holds
	Steps      []Step
	Components []*toa.Component
	// Scripts are the packages whose lockfile entries say they have install scripts
	// (LockedScripts), which run in the base when npm cannot run them on the runner.
	Scripts []string
}

// CheckBase says, before npm runs and before anything is pushed, what this runner lacks to do
// work in the base of p (WithBase): the emulator of a foreign CPU, user namespaces, a /bin/sh for
// build.run lines. The words are those the work itself would fail with, naming the line or the
// packages: a *sandbox.RunnerError for the runner's lacks, the *fault.Input of Run for a base
// without a shell. Work the cache already holds, and scripts npm runs on the runner (the same
// platform, libc and Node major), need nothing of the base.
func CheckBase(ctx context.Context, work BaseWork, p Platform, opts ...Option) error {
	o, err := newOptions(opts)
	if err != nil || o.base == nil {
		return err
	}
	var what string
	shell := false
	if len(work.Shell) > 0 {
		cached, err := o.runCached(work, p)
		if err != nil {
			return err
		}
		if shell = !cached; shell {
			what = fmt.Sprintf("`%s`", work.Shell[0])
		}
	}
	if !shell && len(work.Scripts) > 0 {
		in, err := o.newInstall(ctx, p)
		if err != nil {
			return err
		}
		if in.skipScripts() {
			what = scriptsWork(work)
		}
	}
	if what == "" {
		return nil
	}
	if err := checkRunner(ctx, what, p); err != nil {
		return err
	}
	if !shell {
		return nil
	}
	root, _, err := o.baseRoot(ctx)
	if err != nil {
		return err
	}
	return hasShell(root, work.Shell, p)
}

// CheckRunner is CheckBase for work that runs in the base of p whatever its libc
// (InBaseWhateverLibc), before the base is unpacked and its libc known (p.Libc is not read): the
// emulator of a foreign CPU and user namespaces, in CheckBase's words. build.run lines whose
// layer the cache holds under neither libc need them whatever the libc; the base's /bin/sh is
// CheckBase's, once the base is unpacked.
func CheckRunner(ctx context.Context, work BaseWork, p Platform, opts ...Option) error {
	o, err := newOptions(opts)
	if err != nil || o.base == nil {
		return err
	}
	if len(work.Shell) > 0 {
		cached, err := o.runCachedWhateverLibc(work, p)
		if err != nil {
			return err
		}
		if !cached {
			return checkRunner(ctx, fmt.Sprintf("`%s`", work.Shell[0]), p)
		}
	}
	if len(work.Scripts) == 0 {
		return nil
	}
	inBase, err := o.scriptsInBaseWhateverLibc(ctx, p)
	if err != nil || !inBase {
		return err
	}
	return checkRunner(ctx, scriptsWork(work), p)
}

// checkRunner says what this runner lacks to run what in a base of p: the emulator of a foreign
// CPU, user namespaces.
func checkRunner(ctx context.Context, what string, p Platform) error {
	platform := platformName(p)
	if err := sandbox.Check(platform); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if err := sandbox.CheckUserNamespaces(ctx, platform); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

func scriptsWork(work BaseWork) string {
	return "the install scripts of " + strings.Join(work.Scripts, ", ")
}

// InBaseWhateverLibc says whether the work of p (WithBase) runs in its base whatever the base's
// libc (p.Libc is not read): it has build.run lines, or install scripts for an OS, a CPU or a
// Node major that is not the runner's. Such a base is unpacked whatever it holds, so its libc is
// read in the unpacked root (UnpackBase), not looked for in its layers first.
func InBaseWhateverLibc(ctx context.Context, work BaseWork, p Platform, opts ...Option) (bool, error) {
	o, err := newOptions(opts)
	if err != nil || o.base == nil {
		return false, err
	}
	return o.inBaseWhateverLibc(ctx, work, p)
}

func (o *options) inBaseWhateverLibc(ctx context.Context, work BaseWork, p Platform) (bool, error) {
	if len(work.Shell) > 0 {
		return true, nil
	}
	if len(work.Scripts) == 0 {
		return false, nil
	}
	return o.scriptsInBaseWhateverLibc(ctx, p)
}

// scriptsInBaseWhateverLibc is whether npm skips the install scripts for p whatever the base's
// libc, so that they run in the base.
func (o *options) scriptsInBaseWhateverLibc(ctx context.Context, p Platform) (bool, error) {
	r, err := o.runner(ctx)
	if err != nil {
		return false, err
	}
	p.Libc = r.Libc // the libc aside: does the rest of p make the install a foreign one?
	in, err := o.newInstall(ctx, p)
	if err != nil {
		return false, err
	}
	return in.skipScripts(), nil
}

// LockedScripts are the packages c's lockfile (npm-shrinkwrap.json, else package-lock.json)
// says have install scripts (hasInstallScript), dev dependencies left out as the install leaves
// them: their names, sorted. None without a lockfile, or with one npm will refuse (it says why
// at the install).
func LockedScripts(c *toa.Component) ([]string, error) {
	if c.Lockfile == "" {
		return nil, nil
	}
	packages, err := lockfile.Read(c.Lockfile)
	if errors.Is(err, lockfile.ErrFormat) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	names := map[string]bool{}
	for _, p := range packages {
		if p.HasInstallScript && !p.Dev {
			names[p.PackageName()] = true
		}
	}
	return sortedKeys(names), nil
}

// IsMuslLoader is whether a path in an image is musl's dynamic loader where UnpackBase looks
// for it in an unpacked root (sandbox.Libc): a look in a base's layers says the same of it.
func IsMuslLoader(name string) bool { return sandbox.IsMuslLoader(name) }

// UnpackBase unpacks the base of p (WithBase) when the work of p runs in it whatever the base's
// libc (InBaseWhateverLibc), and says that libc from the root it unpacked (sandbox.Libc): one
// pass over the base's layers, where a look for the libc first reads them all once more (seconds
// for a base of hundreds of MB). ok is false, and nothing is unpacked, otherwise: the libc decides
// then whether the base is needed at all.
func UnpackBase(ctx context.Context, work BaseWork, p Platform, opts ...Option) (libc string, ok bool, err error) {
	o, err := newOptions(opts)
	if err != nil || o.base == nil {
		return "", false, err
	}
	inBase, err := o.inBaseWhateverLibc(ctx, work, p)
	if err != nil || !inBase {
		return "", false, err
	}
	root, _, err := o.baseRoot(ctx)
	if err != nil {
		return "", false, err
	}
	libc, err = sandbox.Libc(root)
	if err != nil {
		return "", false, fmt.Errorf("look for the libc of the unpacked base: %w", err)
	}
	return libc, true, nil
}

// runCachedWhateverLibc says whether the cache holds the layer of lines for p under one libc or
// the other: when it does not, they run in the base whichever it is.
func (o *options) runCachedWhateverLibc(work BaseWork, p Platform) (bool, error) {
	for _, libc := range []string{"glibc", "musl"} {
		p.Libc = libc
		if cached, err := o.runCached(work, p); err != nil || cached {
			return cached, err
		}
	}
	return false, nil
}

// runCached says whether the cache holds the layers of every shell step of work for p: known
// before anything runs only for lines that are build.run's one step (a step after another lays
// its layer over that one's, which the key takes).
func (o *options) runCached(work BaseWork, p Platform) (bool, error) {
	if len(work.Steps) != 1 || len(work.Steps[0].Shell) == 0 {
		return false, nil
	}
	files, err := packageFiles(work.Components)
	if err != nil {
		return false, err
	}
	k, err := o.runKey(work.Steps[0].Shell, files, work.Steps[0].Config, p, false)
	if err != nil {
		return false, err
	}
	return o.lookup("run", k) != nil, nil
}
