package main

import (
	"fmt"

	"github.com/toa-deploy/toa-deploy/image"
	"github.com/toa-deploy/toa-deploy/kustomize"
	"github.com/toa-deploy/toa-deploy/manifest"
	"github.com/toa-deploy/toa-deploy/toa"
)

// writeKustomization writes the application's objects into dir as a kustomization. digests are
// the images the registry has, by repository: those are pinned by digest; every other image by
// the plan's tag. An image with neither is not written down: its containers would run whatever
// the registry calls latest.
func writeKustomization(app *toa.Application, plan *image.Plan, dir string, digests map[string]string) error {
	images := make([]kustomize.Image, 0, len(plan.Images))
	for _, img := range plan.Images {
		digest := digests[img.Repository]
		if digest == "" && img.Tag == "" {
			return &unresolvedError{image: img.Name, why: img.Unresolved}
		}
		images = append(images, kustomize.Image{Name: img.Repository, Digest: digest, NewTag: img.Tag})
	}
	objects, err := manifest.Objects(app, plan)
	if err != nil {
		return err
	}
	return kustomize.Write(dir, objects, images, app.Name)
}

// unresolvedError says the kustomization was not written because an image's tag is not known
// yet (under --plan, a base that could not be resolved).
type unresolvedError struct{ image, why string }

func (e *unresolvedError) Error() string {
	return fmt.Sprintf("the kustomization is not written: the tag of %s is not known: %s", e.image, e.why)
}
