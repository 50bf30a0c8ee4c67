// Package image turns a Toa application into images: it names them (content-addressed tags as
// Toa computes them), resolves their bases, and builds, probes and pushes them. Planning is a
// pure function of the application and the resolved bases; everything that touches a registry
// takes a context and options.
package image

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/toa-deploy/toa-deploy/internal/app/toa"
	"github.com/toa-deploy/toa-deploy/internal/fault"
	"github.com/toa-deploy/toa-deploy/internal/fsys"
	"github.com/toa-deploy/toa-deploy/layer"
)

// DefaultBase is the base of every image whose context names none: Toa's runtime image.
const DefaultBase = "ghcr.io/toa-io/runtime"

// PlanOptions are the inputs of a plan besides the application.
type PlanOptions struct {
	Mono      bool
	Toolchain layer.Toolchain
	// Services are the extension services whose images are built (manifest.ServiceImages).
	Services []Service
	// Bases are the resolved bases by reference (see Bases). A base missing here, or with an
	// error, leaves the tags of the images on it unresolved.
	Bases map[string]*Base
	// Compression is how the layers toa-push makes are compressed: a dependencies image of zstd
	// layers is another image than one of gzip layers, under another tag. "" is gzip.
	Compression layer.Compression
	// ScriptsOnRunner: the install scripts of a target that is the runner's own run on the
	// runner (layer.WithScriptsOnRunner), which makes other images than the sandbox's.
	ScriptsOnRunner bool
}

// Plan is every image a push of the application makes. It is made whole by NewPlan and cannot be
// changed afterwards: its images and warnings are read through methods that hand out copies, so
// the objects made from it and the images pushed from it are of one plan.
type Plan struct {
	images   []*Image
	warnings []string
}

// Images are the plan's images in the order they are built, each a copy.
func (p *Plan) Images() []Image {
	out := make([]Image, len(p.images))
	for i, img := range p.images {
		out[i] = img.clone()
	}
	return out
}

// Warnings are what planning found worth telling the user (a default platform the base lacks).
func (p *Plan) Warnings() []string { return slices.Clone(p.warnings) }

// clone is a copy of the image that shares nothing the plan could see changed: the application's
// values it points at (compositions, components) are read-only by contract everywhere.
func (i *Image) clone() Image {
	c := *i
	c.Components = slices.Clone(i.Components)
	c.Platforms = slices.Clone(i.Platforms)
	return c
}

// Image is one workload's image: a composition's, mono's, or an extension service's.
type Image struct {
	Name        string           // "composition-edge" or "mono"
	Repository  string           // "<registry.base>/<context>/<name>"
	Composition *toa.Composition // nil for mono
	Service     *Service         // the extension service it is the image of; nil for a composition and mono
	Components  []*toa.Component
	Base        string // the base's reference, as the context names it
	BaseFrom    string // where the base came from, for the user
	BaseSource  string // where the base is read: Base, or its mirror's reference
	Mirror      string // the mirror (FROM=TO) the base is read through, or ""
	Run         string // the components' build.run lines
	Platforms   []string

	DepsTag    string // "deps-<hash>", or "" while unresolved
	Version    string // the image version Toa hashes into the tag, or ""
	Tag        string // the 8-hex tag, or "" while unresolved
	Unresolved string // why the tags are not known yet

	base *Base // resolved, or with the error that kept it from being resolved
}

// Reference returns the image's reference with its tag, or "" while it is unresolved.
func (i *Image) Reference() string {
	if i.Tag == "" {
		return ""
	}
	return i.Repository + ":" + i.Tag
}

// DepsReference returns the dependencies image's reference, or "" while it is unresolved.
func (i *Image) DepsReference() string {
	if i.DepsTag == "" {
		return ""
	}
	return i.Repository + ":" + i.DepsTag
}

// Workload is the name of the image's Deployment: "composition-<name>" or "mono".
func (i *Image) Workload() string { return i.Name }

// NewPlan names every image of the application: the compositions' (or mono's), then the
// extension services'. It reads the components' package.json and package-lock.json, which the
// dependencies hash covers, the services' installed files, and nothing else.
func NewPlan(app *toa.Application, opts PlanOptions) (*Plan, error) {
	if err := checkRun(app); err != nil {
		return nil, err
	}
	p := &Plan{}
	units, err := units(app, opts.Mono)
	if err != nil {
		return nil, err
	}
	for _, u := range units {
		img := &Image{
			Name:        u.name,
			Repository:  path.Join(app.Registry.Base, app.Name, u.name),
			Composition: u.composition,
			Components:  u.components,
			Base:        u.base,
			BaseFrom:    u.baseFrom,
			Run:         u.run,
		}
		if err := img.resolve(app, opts, &p.warnings); err != nil {
			return nil, err
		}
		p.images = append(p.images, img)
	}
	for _, s := range opts.Services {
		img, err := serviceImage(app, s, opts, &p.warnings)
		if err != nil {
			return nil, err
		}
		p.images = append(p.images, img)
	}
	p.warnings = unique(p.warnings) // images on one base share its warnings
	return p, nil
}

// Check refuses, before anything is asked or resolved, what no plan of the application can
// hold: build.run lines that need a container, a composition whose components want different
// bases. NewPlan refuses the same.
func Check(app *toa.Application, mono bool) error {
	if err := checkRun(app); err != nil {
		return err
	}
	_, err := units(app, mono)
	return err
}

func unique(list []string) []string {
	var out []string
	for _, s := range list {
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}

type unit struct {
	name        string
	composition *toa.Composition
	components  []*toa.Component
	base        string
	baseFrom    string
	run         string
}

func units(app *toa.Application, mono bool) ([]unit, error) {
	if mono {
		u := unit{name: "mono", components: app.Components}
		if err := u.chooseBase(app, "", "Mono deployment"); err != nil {
			return nil, err
		}
		return []unit{u}, nil
	}
	var out []unit
	for _, c := range app.Compositions {
		u := unit{name: "composition-" + c.Name, composition: c, components: c.Components}
		if err := u.chooseBase(app, c.Image, fmt.Sprintf("Composition '%s'", c.Name)); err != nil {
			return nil, err
		}
		out = append(out, u)
	}
	return out, nil
}

// chooseBase picks the base as Toa 289 does: the composition's image, else its components' one
// build.image (no image counts as a value, so some with and some without is a conflict), else
// registry.build.image, else the runtime image of the context's runtime version.
func (u *unit) chooseBase(app *toa.Application, declared, subject string) error {
	var runs []string
	for _, c := range u.components {
		if c.Build.Run != "" {
			runs = append(runs, c.Build.Run)
		}
	}
	u.run = strings.Join(runs, "\n")
	if declared != "" {
		u.base, u.baseFrom = declared, "the composition's image"
		return nil
	}
	images := map[string]bool{}
	for _, c := range u.components {
		images[c.Build.Image] = true
	}
	if len(images) > 1 {
		return &fault.Input{File: app.File, Key: "compositions",
			Message: subject + " requires different base images for its components. Specify base image for the composition in the context.",
			Hint:    "components " + describeImages(u.components)}
	}
	for image := range images {
		if image != "" {
			u.base, u.baseFrom = image, "its components' build.image"
			return nil
		}
	}
	if app.Registry.Build.Image != "" {
		u.base, u.baseFrom = app.Registry.Build.Image, "registry.build.image"
		return nil
	}
	u.base, u.baseFrom = DefaultBase+":"+app.Runtime.Version, "Toa's runtime image"
	return nil
}

func describeImages(components []*toa.Component) string {
	var parts []string
	for _, c := range components {
		image := c.Build.Image
		if image == "" {
			image = "(none)"
		}
		parts = append(parts, c.Locator.ID+": "+image)
	}
	return strings.Join(parts, ", ")
}

// resolve computes the tags, or says why they cannot be computed yet.
func (img *Image) resolve(app *toa.Application, opts PlanOptions, warnings *[]string) error {
	base, ok := img.takeBase(app, opts)
	if !ok {
		return nil
	}
	platforms, err := base.Select(app, warnings)
	if err != nil {
		return err
	}
	img.Platforms = platforms
	hash, err := depsHash(app, img, base, opts)
	if err != nil {
		return err
	}
	img.DepsTag = "deps-" + hash
	img.Version = imageVersion(img.Components, hash)
	img.Tag = Tag(app.Runtime.Version, img.Version)
	return nil
}

// Tag is Toa's image tag: the first 8 hex digits of sha256(runtime version ‖ image version).
func Tag(runtimeVersion, imageVersion string) string {
	h := sha256.Sum256([]byte(runtimeVersion + imageVersion))
	return hex.EncodeToString(h[:])[:8]
}

// imageVersion is Toa 289's bundle version: each component's id and version in order, then the
// dependencies version, since the same sources over other dependencies are another image.
func imageVersion(components []*toa.Component, depsVersion string) string {
	h := sha256.New()
	for _, c := range components {
		io.WriteString(h, c.Locator.ID)
		io.WriteString(h, c.Version)
	}
	io.WriteString(h, depsVersion)
	return hex.EncodeToString(h.Sum(nil))[:8]
}

// depsHash covers everything the install reads: Toa 289's inputs with the base's name replaced by
// the digests of the platforms built, and the runner's node and npm versions.
func depsHash(app *toa.Application, img *Image, base *Base, opts PlanOptions) (string, error) {
	tools, compression := opts.Toolchain, opts.Compression
	h := sha256.New()
	// the base's name held no place here but its own: its digests (Pairs) are the input, so that
	// a retag or a mirror of the same base keeps the tags; the empty field keeps every tag of a
	// context that never named registry.build.image what it was
	const baseName = ""
	inputs := []string{app.Runtime.Version, app.Runtime.Registry, app.Runtime.Proxy,
		base.Pairs(img.Platforms), baseName, app.Registry.Build.Run, img.Run}
	inputs = append(inputs, app.Registry.Build.Arguments...)
	inputs = append(inputs, "node "+tools.Node, "npm "+tools.Npm)
	inputs = append(inputs, base.formatInput()...)
	// nothing for gzip, so that its tags are those toa-push always gave; zstd layers are other
	// blobs, and a push with --compression zstd must not take the gzip image for its own
	if compression != "" && compression != layer.Gzip {
		inputs = append(inputs, "layers compressed with "+string(compression))
	}
	// since 2026-12 every install script and build.run line runs in the base, in the order of
	// 289's Dockerfile: images made before are not these
	inputs = append(inputs, "built in the base in 289's order")
	if opts.ScriptsOnRunner {
		inputs = append(inputs, "install scripts on the runner")
	}
	for _, in := range inputs {
		io.WriteString(h, in)
		h.Write([]byte{0})
	}
	components := append([]*toa.Component(nil), img.Components...)
	sort.SliceStable(components, func(i, j int) bool { return components[i].Locator.Label < components[j].Locator.Label })
	for _, c := range components {
		for _, file := range []string{c.PackageJSON, c.Lockfile} {
			if file == "" {
				continue
			}
			limit := int64(fsys.MaxPackageSize)
			if file == c.Lockfile {
				limit = fsys.MaxLockSize
			}
			data, err := fsys.ReadFile(file, limit)
			if err != nil {
				return "", err
			}
			io.WriteString(h, c.Locator.Label)
			io.WriteString(h, path.Base(file))
			h.Write(data)
		}
		if err := hashLocalPackages(h, c); err != nil {
			return "", err
		}
	}
	return hex.EncodeToString(h.Sum(nil))[:8], nil
}

// hashLocalPackages writes into h the contents of every package c installs from the disk (a
// `file:` folder or tarball, a workspace), by its path from the component's folder: one edited
// in place is another dependencies image, in any folder the application is checked out to.
func hashLocalPackages(h io.Writer, c *toa.Component) error {
	locals, err := c.LocalPackages()
	if err != nil {
		return err
	}
	for _, l := range locals {
		sum, err := l.Hash()
		if errors.Is(err, fs.ErrNotExist) {
			sum = "missing" // npm ci says what is missing, if it needs it
		} else if err != nil {
			return fmt.Errorf("hash the local package %s of %s: %w", l.Spec, c.Locator.ID, err)
		}
		rel, err := filepath.Rel(c.Path, l.Path)
		if err != nil {
			rel = l.Path
		}
		fmt.Fprintf(h, "%s\x00local\x00%s\x00%s\x00", c.Locator.Label, filepath.ToSlash(rel), sum)
	}
	return nil
}

// checkRun refuses, before anything is built, the build.run lines that cannot run without a
// container.
func checkRun(app *toa.Application) error {
	check := func(run, file, key string) error {
		npmLines, _ := layer.SplitLines(strings.Split(run, "\n"))
		_, _, err := layer.ParseRun(strings.Join(npmLines, "\n"))
		var e *fault.Input
		if errors.As(err, &e) {
			e.File, e.Key = file, key
		}
		return err
	}
	if err := check(app.Registry.Build.Run, app.File, "registry.build.run"); err != nil {
		return err
	}
	for _, c := range app.Components {
		if err := check(c.Build.Run, c.Manifest, "build.run"); err != nil {
			return err
		}
	}
	return nil
}
