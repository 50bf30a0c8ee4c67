package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/toa-deploy/toa-deploy/fault"
	"github.com/toa-deploy/toa-deploy/image"
	"github.com/toa-deploy/toa-deploy/internal/cli"
	"github.com/toa-deploy/toa-deploy/layer"
	"github.com/toa-deploy/toa-deploy/manifest"
	"github.com/toa-deploy/toa-deploy/toa"
)

type pushCommand struct {
	Env            string        `arg:"" optional:"" name:"ENV" help:"Environment, as Toa's 'toa deploy [environment]'; a chain like staging:production is allowed. Default: TOA_ENV, else 'default'."`
	Path           string        `name:"path" short:"p" default:"." placeholder:"DIR" help:"The context's folder (the one with context.toa.yaml)."`
	Plan           bool          `name:"plan" help:"Print what would be built, and build and push nothing."`
	Kustomization  string        `name:"kustomization" short:"k" placeholder:"DIR" help:"Where the kustomization goes. Default: deployment; with --oci-layout, DIR/kustomization."`
	Output         cli.Output    `name:"output" short:"o" default:"text" enum:"text,json" help:"text or json."`
	Mono           bool          `name:"mono" help:"One 'mono' image and deployment, as Toa's --mono."`
	Insecure       bool          `name:"insecure" help:"Allow registries with plain HTTP or certificates that do not verify."`
	CAFile         string        `name:"ca-file" type:"existingfile" placeholder:"FILE" help:"Trust this CA for registries."`
	ResolveTimeout time.Duration `name:"resolve-timeout" default:"20s" help:"How long resolving a base may take."`
	Timeout        time.Duration `name:"timeout" default:"1h" help:"How long the whole run may take (a Go duration: 30m, 1h30m); past it toa-push stops, leaves no tag on an unfinished image, and exits 3."`
	StallTimeout   time.Duration `name:"stall-timeout" default:"60s" help:"How long a transfer may move no byte before it fails and is retried."`
	Retries        int           `name:"retries" default:"5" help:"How often a failed request or blob transfer is tried again (a broken or stalled connection, a registry's 5xx or 429), with jittered exponential backoff that honours Retry-After."`
	Mirror         []string      `name:"mirror" placeholder:"FROM=TO" help:"Read bases whose reference begins with FROM (a registry host, or host/path) from TO instead, e.g. ghcr.io=mirror.internal:5000/ghcr for Toa's runtime image. Repeatable; adds to TOA_MIRRORS (comma-separated FROM=TO), and overrides it for the same FROM. The mirror is recorded in the images' annotations; the tags stay the same."`
	OCILayout      string        `name:"oci-layout" placeholder:"DIR" help:"Write every image of the application, base layers included, into an OCI image layout in DIR (and the kustomization into DIR/kustomization) instead of pushing: no target registry is contacted. Carry DIR to the other side and run toa-push --from-oci-layout DIR there."`
	FromOCILayout  string        `name:"from-oci-layout" placeholder:"DIR" help:"Push the images of an OCI layout written by --oci-layout to the registry they name, and write its kustomization (-k, default deployment). Needs only DIR: no context, no sources, no npm."`
	Verbose        bool          `name:"verbose" short:"v" help:"Log what is done, step by step."`
}

// Validate refuses flags that cannot go together, before any work.
func (c *pushCommand) Validate() error {
	switch {
	case c.Timeout <= 0:
		return fmt.Errorf("--timeout is %s: give a positive duration, like 30m", c.Timeout)
	case c.StallTimeout <= 0:
		return fmt.Errorf("--stall-timeout is %s: give a positive duration, like 60s", c.StallTimeout)
	case c.Retries < 0:
		return fmt.Errorf("--retries is %d: give 0 or more", c.Retries)
	}
	if c.FromOCILayout == "" {
		if c.OCILayout != "" && c.Kustomization != "" && filepath.Clean(c.Kustomization) == filepath.Clean(c.OCILayout) {
			return fmt.Errorf("--kustomization cannot be the --oci-layout folder itself: leave it out (the kustomization goes to %s)", filepath.Join(c.OCILayout, "kustomization"))
		}
		return nil
	}
	for flag, set := range map[string]bool{"environment argument": c.Env != "", "--plan": c.Plan, "--mono": c.Mono,
		"--oci-layout": c.OCILayout != "", "--mirror": len(c.Mirror) > 0} {
		if set {
			return fmt.Errorf("--from-oci-layout pushes the layout as --oci-layout wrote it, and takes no %s: give those where the layout is written", flag)
		}
	}
	return nil
}

// kustomizationDir is where the kustomization goes: -k, else beside the layout's images, else
// deployment.
func (c *pushCommand) kustomizationDir() string {
	switch {
	case c.Kustomization != "":
		return c.Kustomization
	case c.OCILayout != "":
		return filepath.Join(c.OCILayout, "kustomization")
	}
	return "deployment"
}

// mirrors are TOA_MIRRORS', then --mirror's, a flag overriding the environment for the same FROM.
func (c *pushCommand) mirrors() (image.Mirrors, error) {
	specs := strings.Split(os.Getenv("TOA_MIRRORS"), ",")
	m, err := image.ParseMirrors(append(specs, c.Mirror...)...)
	if err != nil {
		return nil, fault.BadInput(err)
	}
	return m, nil
}

func (c *pushCommand) environment() string {
	if c.Env != "" {
		return c.Env
	}
	if env := os.Getenv("TOA_ENV"); env != "" {
		return env
	}
	return "default"
}

// Run runs the push under --timeout: running out of it exits 3, saying what was being done.
func (c *pushCommand) Run(ctx context.Context, log *logrus.Logger) error {
	ctx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()
	err := c.run(ctx, log)
	if err != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fault.TimedOut(fmt.Errorf("toa-push ran out of time (--timeout %s): %w", c.Timeout, err))
	}
	return err
}

// registries is how this run talks to registries, shaped by the flags.
func (c *pushCommand) registries(log *logrus.Logger, opts ...image.RegistryOption) (*image.Registries, error) {
	opts = append([]image.RegistryOption{image.WithInsecure(c.Insecure), image.WithCAFile(c.CAFile),
		image.WithStallTimeout(c.StallTimeout), image.WithRetries(c.Retries), image.WithMemory(cacheDir()),
		image.WithNotify(func(s string) { log.Warn(s) })}, opts...)
	reg, err := image.NewRegistries(opts...)
	if err != nil {
		return nil, fault.BadInput(err)
	}
	return reg, nil
}

func (c *pushCommand) run(ctx context.Context, log *logrus.Logger) error {
	if c.FromOCILayout != "" {
		return c.pushLayout(ctx, log)
	}
	app, err := c.load()
	if err != nil {
		return err
	}
	for _, w := range app.Warnings {
		log.Warn(w)
	}
	mirrors, err := c.mirrors()
	if err != nil {
		return err
	}
	reg, err := c.registries(log, image.WithMirrors(mirrors))
	if err != nil {
		return err
	}
	var dest image.Destination = image.NewRegistryDestination(reg)
	if c.OCILayout != "" {
		layout, err := image.OpenLayout(c.OCILayout, map[string]string{image.AnnotationContext: app.Name, image.AnnotationEnvironment: app.Environment})
		if err != nil {
			return fault.BadInput(err)
		}
		dest = layout
	}
	tools, err := layer.DetectToolchain(ctx)
	if err != nil {
		return err
	}
	plan, err := c.plan(ctx, app, reg, tools)
	if err != nil {
		return err
	}
	deps, err := c.extensions(ctx, log, app, plan, reg, tools)
	if err != nil {
		return err
	}
	for _, w := range plan.Warnings {
		log.Warn(w)
	}
	if c.Plan {
		return c.writePlan(ctx, log, app, plan, deps, dest)
	}
	display := cli.NewDisplay(os.Stderr)
	layers := image.NewLayers(app, tools, layer.WithWarnings(func(w string) { display.Print("warning: " + w) }))
	result, err := image.Push(ctx, app, plan, image.PushOptions{
		Registries:  reg,
		Destination: dest,
		Layers:      layers,
		CacheDir:    cacheDir(),
		Events:      func(e image.Event) { display.Set(e.Image, e.Message) },
	})
	if err != nil {
		return err
	}
	if err := writeKustomization(app, plan, deps, c.kustomizationDir(), result.Digests()); err != nil {
		return err
	}
	out := pushReport{Context: app.Name, Environment: app.Environment, Result: result, Kustomization: c.kustomizationDir(), Layout: c.OCILayout}
	if c.Output == cli.JSON {
		return writePushJSON(os.Stdout, out)
	}
	return writePushText(os.Stdout, out)
}

// writePlan prints the plan and writes the kustomization with what is known: the digests of the
// images the registry already has, the plan's tags for the others.
func (c *pushCommand) writePlan(ctx context.Context, log *logrus.Logger, app *toa.Application, plan *image.Plan, deps *manifest.Dependencies, dest image.Destination) error {
	digests, err := image.Probe(ctx, dest, plan)
	if err != nil {
		log.Warnf("the registry could not be asked which images it has: %v", err)
	}
	if c.Output == cli.JSON {
		err = writePlanJSON(os.Stdout, app, plan)
	} else {
		err = writePlanText(os.Stdout, app, plan)
	}
	if err != nil {
		return err
	}
	var notWritten *notWrittenError
	switch err := writeKustomization(app, plan, deps, c.kustomizationDir(), digests); {
	case errors.As(err, &notWritten):
		log.Warn(err.Error())
	case err != nil:
		return err
	default:
		log.Infof("wrote the kustomization to %s", c.kustomizationDir())
	}
	return nil
}

// load reads the application, and says so when ENV looks like the folder the user meant.
func (c *pushCommand) load() (*toa.Application, error) {
	app, err := toa.Load(c.Path, c.environment())
	if err == nil {
		return app, nil
	}
	var e *fault.Input
	if c.Env != "" && errors.As(err, &e) && errors.Is(err, toa.ErrNoContext) {
		if info, statErr := os.Stat(filepath.Join(c.Env, toa.ContextFile)); statErr == nil && !info.IsDir() {
			e.Hint = fmt.Sprintf("'%s' is taken as the environment; to read the context in that folder, run toa-push --path %s", c.Env, c.Env)
		}
	}
	return nil, err
}

func (c *pushCommand) plan(ctx context.Context, app *toa.Application, reg *image.Registries, tools layer.Toolchain) (*image.Plan, error) {
	refs, err := image.Bases(app, c.Mono)
	if err != nil {
		return nil, err
	}
	bases := make([]*image.Base, len(refs))
	var wg sync.WaitGroup
	for i, ref := range refs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rctx, cancel := context.WithTimeout(ctx, c.ResolveTimeout)
			defer cancel()
			bases[i] = image.ResolveBase(rctx, reg, ref)
		}()
	}
	wg.Wait()
	resolved := map[string]*image.Base{}
	for i, ref := range refs {
		resolved[ref] = bases[i]
	}
	return image.NewPlan(app, image.PlanOptions{Mono: c.Mono, Toolchain: tools, Bases: resolved})
}

// cacheDir is where toa-push keeps what it learnt: layers, npm's cache, the bases' libc.
func cacheDir() string {
	dir, err := layer.DefaultCacheDir()
	if err != nil {
		return ""
	}
	return dir
}
