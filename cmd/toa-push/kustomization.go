package main

import (
	"fmt"

	"sigs.k8s.io/kustomize/api/types"

	"github.com/toa-deploy/toa-deploy/image"
	"github.com/toa-deploy/toa-deploy/manifest"
	"github.com/toa-deploy/toa-deploy/toa"
)

// writeKustomization writes the application's objects into dir as a kustomization: the
// compositions' (or, when the plan is of mono, mono's) and the extension services' that deps
// declare. digests are the images the registry has, by repository: those are pinned by digest;
// every other image by the plan's tag. An image with neither is not written down (its containers
// would run whatever the registry calls latest): the kustomization is then not written, and the
// error is a *notWrittenError.
func writeKustomization(app *toa.Application, plan *image.Plan, deps *manifest.Dependencies, dir string, digests map[string]string) error {
	// the application's mistakes first: they are worth knowing even when a tag is not
	objects, err := manifest.Objects(app, plan, manifest.WithDependencies(deps))
	if err != nil {
		return err
	}
	images := make([]types.Image, 0, len(plan.Images))
	for _, img := range plan.Images {
		digest := digests[img.Repository]
		if digest == "" && img.Tag == "" {
			return &notWrittenError{fmt.Sprintf("the tag of %s is not known: %s", img.Name, img.Unresolved)}
		}
		images = append(images, types.Image{Name: img.Repository, Digest: digest, NewTag: img.Tag})
	}
	files, err := manifest.Kustomization(objects, images, app.Name)
	if err != nil {
		return err
	}
	return manifest.WriteKustomization(dir, files)
}

// notWrittenError says why the kustomization was not written, when that is no failure of the
// run: under --plan, a base that could not be resolved leaves its images' tags unknown.
type notWrittenError struct{ why string }

func (e *notWrittenError) Error() string { return "the kustomization is not written: " + e.why }
