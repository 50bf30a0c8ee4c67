package pipeline

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/toa-deploy/toa-deploy/internal/fault"
	"github.com/toa-deploy/toa-deploy/internal/fsys"
	"github.com/toa-deploy/toa-deploy/internal/push/attest"
	"github.com/toa-deploy/toa-deploy/internal/push/image"
	"github.com/toa-deploy/toa-deploy/internal/push/layout"
	"github.com/toa-deploy/toa-deploy/manifest"
)

// Report is what a push did: the images, and where the kustomization went.
type Report struct {
	Context, Environment string
	Result               *image.Result
	Kustomization        string // the folder written
	Layout               string // the OCI layout written to, or ""
	FromLayout           string // the OCI layout pushed from, or ""

	Artifact *ArtifactReport // the kustomization as a Flux artifact (WithArtifact), or nil
}

// PlanReport is what a plan found: the plan, the images the destination already has, and the
// kustomization written with them.
type PlanReport struct {
	*Planned
	Digests       map[string]string // the destination's digests of the images it has, by repository
	Kustomization string            // the folder written, or "" when it was not
}

// Push builds every image of the application in the folder path for the environment env, pushes
// what the destination lacks (the registries the images name, or WithOCILayout's layout) and
// writes the kustomization pinned by digest.
func Push(ctx context.Context, path, env string, opts ...Option) (*Report, error) {
	o, err := newOptions(opts)
	if err != nil {
		return nil, err
	}
	if err := checkOutputs(o); err != nil {
		return nil, err
	}
	if err := checkArtifactRef(o.artifact); err != nil {
		return nil, err
	}
	p, dest, err := start(ctx, path, env, o)
	if err != nil {
		return nil, err
	}
	// the bases unpacked for this push stay while it runs, whatever another run prunes
	p.holds = fsys.NewHolds()
	defer p.holds.Release()
	marshalled := marshalObjects(p.Objects)
	result, err := image.Push(ctx, p.App, p.Plan, image.PushOptions{
		Registries:  o.registries,
		Destination: dest,
		Layers:      o.layers(p),
		Jobs:        o.jobs,
		CacheDir:    o.cacheDir,
		Epoch:       p.epoch,
		Events:      o.events,
		Attach:      o.attacher(p),
	})
	if err != nil {
		return nil, err
	}
	objects, err := marshalled.wait()
	if err != nil {
		return nil, err
	}
	dir := o.kustomizationDir()
	if err := writeObjects(p, objects, dir, result.Digests()); err != nil {
		return nil, err
	}
	o.log.Debugf("wrote the kustomization to %s", dir)
	report := &Report{Context: p.App.Name, Environment: p.App.Environment, Result: result, Kustomization: dir, Layout: o.ociLayout}
	if o.artifact != "" {
		if report.Artifact, err = o.pushArtifact(ctx, dest, dir, p.epoch, p.App.Name, p.App.Environment); err != nil {
			return nil, err
		}
	}
	return report, nil
}

// attacher attaches what WithAttestation asks for to the images of p, or nothing.
func (o *options) attacher(p *Planned) image.Attacher {
	if o.sbom == attest.None && o.signer == nil {
		return nil
	}
	return attest.Attacher(attest.Options{Format: o.sbom, Signer: o.signer, Builder: attest.ToaPush(),
		Context: p.App.Name, Environment: p.App.Environment, Runtime: p.App.Runtime.Version,
		Node: p.toolchain.Node, Npm: p.toolchain.Npm, Created: p.epoch, CacheDir: o.cacheDir})
}

// Plan plans every image of the application, asks the destination which it has, and writes the
// kustomization with what is known: the digests of the images the destination has, the plan's
// tags for the others. It builds and pushes nothing. A base whose registry is out of reach is
// planned from what it was last resolved to (a warning says how long ago); one never resolved
// leaves its images' tags unknown, and then the kustomization is not written: the report comes
// back with a *NotWrittenError, so that the plan can still be shown.
func Plan(ctx context.Context, path, env string, opts ...Option) (*PlanReport, error) {
	o, err := newOptions(opts)
	if err != nil {
		return nil, err
	}
	o.planning = true
	if err := checkOutputs(o); err != nil {
		return nil, err
	}
	p, dest, err := start(ctx, path, env, o)
	if err != nil {
		return nil, err
	}
	report := &PlanReport{Planned: p}
	report.Digests, err = image.Probe(ctx, dest, p.Plan)
	if err != nil {
		o.warn("the registry could not be asked which images it has: " + err.Error())
	}
	dir := o.kustomizationDir()
	if err := writeKustomization(p, dir, report.Digests); err != nil {
		return report, err
	}
	o.log.Infof("wrote the kustomization to %s", dir)
	report.Kustomization = dir
	return report, nil
}

// start prepares the application and opens where its images go.
func start(ctx context.Context, path, env string, o *options) (*Planned, image.Destination, error) {
	p, err := prepare(ctx, path, env, o)
	if err != nil {
		return nil, nil, err
	}
	var dest image.Destination = image.NewRegistryDestination(o.registries)
	if o.ociLayout != "" {
		l, err := layout.Open(o.ociLayout, map[string]string{layout.AnnotationContext: p.App.Name, layout.AnnotationEnvironment: p.App.Environment})
		if err != nil {
			return nil, nil, fault.BadInput(err)
		}
		dest = l
	}
	return p, dest, nil
}

// LayoutKustomization is the folder beside a layout's images where its kustomization goes.
func LayoutKustomization(dir string) string { return filepath.Join(dir, "kustomization") }

// PushLayout pushes the images of an OCI layout written by Push WithOCILayout to the registries
// they name, and copies the kustomization written beside them to WithKustomization's folder as
// it is. Neither the context nor the sources are read: the references, the digests and the
// objects were all fixed where the layout was written.
func PushLayout(ctx context.Context, dir string, opts ...Option) (*Report, error) {
	o, err := newOptions(opts)
	if err != nil {
		return nil, err
	}
	to := o.kustomizationDir()
	if err := manifest.CheckKustomizationDir(to); err != nil {
		return nil, err
	}
	l, err := layout.Read(dir)
	if err != nil {
		return nil, fault.BadInput(err)
	}
	entries, err := l.Entries()
	if err != nil {
		return nil, fault.BadInput(err)
	}
	from := LayoutKustomization(dir)
	files, err := layoutKustomization(from, entries)
	if err != nil {
		return nil, err
	}
	result, err := layout.Push(ctx, l, image.PushOptions{Registries: o.registries, Jobs: o.jobs, Events: o.events})
	if err != nil {
		return nil, err
	}
	artifactReport, err := o.pushLayoutArtifact(ctx, l)
	if err != nil {
		return nil, err
	}
	if err := manifest.WriteKustomization(to, files); err != nil {
		return nil, err
	}
	o.log.Debugf("copied the kustomization from %s to %s", from, to)
	report := &Report{Result: result, Kustomization: to, FromLayout: dir, Artifact: artifactReport}
	for _, e := range entries {
		report.Context, report.Environment = e.Annotations[layout.AnnotationContext], e.Annotations[layout.AnnotationEnvironment]
	}
	return report, nil
}

// layoutKustomization reads the kustomization beside a layout's images and makes sure that it
// pins every image by a digest that the layout holds for its repository, before anything is
// pushed.
func layoutKustomization(dir string, entries []layout.Entry) (map[string][]byte, error) {
	files, k, err := manifest.ReadKustomization(dir)
	var input *fault.Input
	if errors.As(err, &input) && !exists(filepath.Join(dir, manifest.KustomizationFile)) {
		return nil, fault.BadInputf("the OCI layout has no kustomization beside its images (%s); write it with toa-push --oci-layout", dir)
	}
	if err != nil {
		return nil, err
	}
	refuse := func(format string, args ...any) error {
		return fault.BadInputf("the kustomization in %s: %s; write the layout again with toa-push --oci-layout", dir, fmt.Sprintf(format, args...))
	}
	if len(k.Images) == 0 {
		return nil, refuse("it names no image")
	}
	for _, img := range k.Images {
		if img.Digest == "" {
			return nil, refuse("%s is not pinned by a digest", img.Name)
		}
		if !slices.ContainsFunc(entries, func(e layout.Entry) bool { return e.Repository() == img.Name && e.Digest == img.Digest }) {
			return nil, refuse("it pins %s@%s, which the layout does not hold", img.Name, img.Digest)
		}
	}
	return files, nil
}

func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}
