package main

import (
	"context"
	"os"

	"github.com/sirupsen/logrus"

	"github.com/toa-deploy/toa-deploy/extension"
	"github.com/toa-deploy/toa-deploy/image"
	"github.com/toa-deploy/toa-deploy/layer"
	"github.com/toa-deploy/toa-deploy/manifest"
	"github.com/toa-deploy/toa-deploy/toa"
)

// extensions asks the application's extensions and connectors, installed under the context's
// node_modules, what they deploy; adds the images of their services to the plan; and makes the
// objects once, so that Toa's refusals (ports, ingress, resources, the services a composition
// lists) reach the user before anything is printed, built or pushed.
func (c *pushCommand) extensions(ctx context.Context, log *logrus.Logger, app *toa.Application, plan *image.Plan,
	reg *image.Registries, tools layer.Toolchain) (*manifest.Dependencies, error) {
	deps, err := c.dependencies(ctx, log, app)
	if err != nil {
		return nil, err
	}
	if err := c.planServices(ctx, app, plan, reg, tools, deps); err != nil {
		return nil, err
	}
	if _, err := manifest.Objects(app, plan, manifest.WithDependencies(deps)); err != nil {
		return nil, err
	}
	return deps, nil
}

// dependencies asks the packages, or takes an earlier run's answers from the cache; what they
// print goes to stderr with --verbose.
func (c *pushCommand) dependencies(ctx context.Context, log *logrus.Logger, app *toa.Application) (*manifest.Dependencies, error) {
	opts := []extension.Option{extension.WithCache(cacheDir())}
	if c.Verbose {
		opts = append(opts, extension.WithOutput(os.Stderr))
	}
	log.Debug("asking the extensions what they deploy")
	res, err := extension.Resolve(ctx, app, opts...)
	if err != nil {
		return nil, err
	}
	for _, d := range res.Dependencies {
		log.Debugf("%s %s from %s", d.Reference, d.Version, d.Dir)
	}
	if res.Started == 0 {
		log.Debug("the extensions' answers are the cache's: nothing they read has changed")
	}
	for _, w := range res.Warnings {
		log.Warn(w)
	}
	return manifest.Merge(res), nil
}

// planServices adds to the plan the images of the extension services the application builds:
// none with --mono, none a composition runs, none the context takes as published.
func (c *pushCommand) planServices(ctx context.Context, app *toa.Application, plan *image.Plan, reg *image.Registries,
	tools layer.Toolchain, deps *manifest.Dependencies) error {
	services := manifest.ServiceImages(app, deps, c.Mono)
	if len(services) == 0 {
		return nil
	}
	ref := image.ServiceBase(app)
	rctx, cancel := context.WithTimeout(ctx, c.ResolveTimeout)
	defer cancel()
	base := image.ResolveBase(rctx, reg, ref)
	return plan.AddServices(app, services, image.PlanOptions{Toolchain: tools, Bases: map[string]*image.Base{ref: base}})
}
