package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/toa-deploy/toa-deploy/internal/push/pipeline"
)

// planJSON is the plan as programs read it (`-o json`).
type planJSON struct {
	Context     string      `json:"context"`
	Environment string      `json:"environment"`
	Runtime     string      `json:"runtime"`
	Images      []imageJSON `json:"images"`
	Warnings    []string    `json:"warnings"`
}

type imageJSON struct {
	Name         string          `json:"name"`
	Repository   string          `json:"repository"`
	Reference    string          `json:"reference,omitempty"`
	Tag          string          `json:"tag,omitempty"`
	Dependencies string          `json:"dependencies,omitempty"`
	Base         baseJSON        `json:"base"`
	Platforms    []string        `json:"platforms"`
	Components   []componentJSON `json:"components"`
	Unresolved   string          `json:"unresolved,omitempty"`
}

type baseJSON struct {
	Reference string `json:"reference"`
	From      string `json:"from"`
	Source    string `json:"source,omitempty"` // the mirror's reference it is read from
	Mirror    string `json:"mirror,omitempty"` // FROM=TO
}

type componentJSON struct {
	ID       string `json:"id"`
	Label    string `json:"label"`
	Version  string `json:"version"`
	Declared bool   `json:"versionDeclared"`
}

func writePlanJSON(w io.Writer, p *pipeline.PlanReport) error {
	app, plan := p.App, p.Plan
	out := planJSON{Context: app.Name, Environment: app.Environment, Runtime: app.Runtime.Version,
		Images: []imageJSON{}, Warnings: append([]string{}, p.Warnings...)}
	for _, img := range plan.Images() {
		j := imageJSON{Name: img.Name, Repository: img.Repository, Reference: img.Reference(), Tag: img.Tag,
			Dependencies: img.DepsReference(), Base: baseJSON{Reference: img.Base, From: img.BaseFrom}, Platforms: img.Platforms,
			Unresolved: img.Unresolved}
		if img.Mirror != "" {
			j.Base.Source, j.Base.Mirror = img.BaseSource, img.Mirror
		}
		for _, c := range img.Components {
			j.Components = append(j.Components, componentJSON{c.Locator.ID, c.Locator.Label, c.Version, c.VersionDeclared})
		}
		out.Images = append(out.Images, j)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

func writePlanText(w io.Writer, p *pipeline.PlanReport) error {
	app, plan := p.App, p.Plan
	env := app.Environment
	if env == "" {
		env = "none"
	}
	fmt.Fprintf(w, "context %s, environment %s, runtime %s\n", app.Name, env, app.Runtime.Version)
	for _, img := range plan.Images() {
		fmt.Fprintf(w, "\n%s\n", img.Name)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		ref, deps := img.Reference(), img.DepsReference()
		if ref == "" {
			ref, deps = img.Repository+":(unresolved)", img.Repository+":deps-(unresolved)"
		}
		fmt.Fprintf(tw, "  image\t%s\n", ref)
		if svc := img.Service; svc != nil {
			// a service's image is the extension's package over the base: no dependencies image
			fmt.Fprintf(tw, "  package\t%s %s (%s)\n", svc.Reference, svc.Version, svc.Dir)
		} else {
			fmt.Fprintf(tw, "  dependencies\t%s\n", deps)
		}
		fmt.Fprintf(tw, "  base\t%s (%s)\n", img.Base, img.BaseFrom)
		if img.Mirror != "" {
			fmt.Fprintf(tw, "  read from\t%s (--mirror %s)\n", img.BaseSource, img.Mirror)
		}
		fmt.Fprintf(tw, "  platforms\t%s\n", strings.Join(img.Platforms, ", "))
		for i, c := range img.Components {
			head := ""
			if i == 0 {
				head = "components"
			}
			version := c.Version
			if c.VersionDeclared {
				version += " (declared)"
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", head, c.Locator.ID, c.Locator.Label, version)
		}
		if img.Unresolved != "" {
			fmt.Fprintf(tw, "  unresolved\t%s\n", img.Unresolved)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	return nil
}
