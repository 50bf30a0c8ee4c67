package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/toa-deploy/toa-deploy/image"
	"github.com/toa-deploy/toa-deploy/internal/cli"
	"github.com/toa-deploy/toa-deploy/layer"
	"github.com/toa-deploy/toa-deploy/toa"
)

type pushCommand struct {
	Env           string        `arg:"" optional:"" name:"ENV" help:"Environment, as Toa's 'toa deploy [environment]'; a chain like staging:production is allowed. Default: TOA_ENV, else 'default'."`
	Path          string        `name:"path" short:"p" default:"." placeholder:"DIR" help:"The context's folder (the one with context.toa.yaml)."`
	Plan          bool          `name:"plan" help:"Print what would be built, and build and push nothing."`
	Kustomization string        `name:"kustomization" short:"k" default:"deployment" placeholder:"DIR" help:"Where the kustomization goes."`
	Output        cli.Output    `name:"output" short:"o" default:"text" enum:"text,json" help:"text or json."`
	Mono          bool          `name:"mono" help:"One 'mono' image and deployment, as Toa's --mono."`
	Insecure      bool          `name:"insecure" help:"Allow registries with plain HTTP or certificates that do not verify."`
	CAFile        string        `name:"ca-file" type:"existingfile" placeholder:"FILE" help:"Trust this CA for registries."`
	Timeout       time.Duration `name:"resolve-timeout" default:"20s" help:"How long resolving a base may take."`
	Verbose       bool          `name:"verbose" short:"v" help:"Log what is done, step by step."`
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

func (c *pushCommand) Run(ctx context.Context, log *logrus.Logger) error {
	app, err := c.load()
	if err != nil {
		return err
	}
	for _, w := range app.Warnings {
		log.Warn(w)
	}
	if !c.Plan {
		return &cli.BadInput{Err: errors.New("building and pushing images is not implemented yet: run toa-push --plan")}
	}
	plan, err := c.plan(ctx, app)
	if err != nil {
		return err
	}
	for _, w := range plan.Warnings {
		log.Warn(w)
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
	switch err := writeKustomization(app, plan, c.Kustomization, nil); {
	case errors.As(err, &notWritten):
		log.Warn(err.Error())
	case err != nil:
		return err
	default:
		log.Infof("wrote the kustomization to %s", c.Kustomization)
	}
	return nil
}

// load reads the application, and says so when ENV looks like the folder the user meant.
func (c *pushCommand) load() (*toa.Application, error) {
	app, err := toa.Load(c.Path, c.environment())
	if err == nil {
		return app, nil
	}
	var e *toa.Error
	if c.Env != "" && errors.As(err, &e) && errors.Is(err, toa.ErrNoContext) {
		if info, statErr := os.Stat(filepath.Join(c.Env, toa.ContextFile)); statErr == nil && !info.IsDir() {
			e.Hint = fmt.Sprintf("'%s' is taken as the environment; to read the context in that folder, run toa-push --path %s", c.Env, c.Env)
		}
	}
	return nil, err
}

func (c *pushCommand) plan(ctx context.Context, app *toa.Application) (*image.Plan, error) {
	tools, err := layer.DetectToolchain(ctx)
	if err != nil {
		return nil, err
	}
	refs, err := image.Bases(app, c.Mono)
	if err != nil {
		return nil, err
	}
	reg, err := image.NewRegistries(image.WithInsecure(c.Insecure), image.WithCAFile(c.CAFile))
	if err != nil {
		return nil, &cli.BadInput{Err: err}
	}
	bases := map[string]*image.Base{}
	for _, ref := range refs {
		rctx, cancel := context.WithTimeout(ctx, c.Timeout)
		bases[ref] = image.ResolveBase(rctx, reg, ref)
		cancel()
	}
	return image.NewPlan(app, image.PlanOptions{Mono: c.Mono, Toolchain: tools, Bases: bases})
}
