package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/sirupsen/logrus"

	"github.com/toa-deploy/toa-deploy/fault"
	"github.com/toa-deploy/toa-deploy/image"
	"github.com/toa-deploy/toa-deploy/internal/cli"
	"github.com/toa-deploy/toa-deploy/manifest"
)

// pushLayout is --from-oci-layout: the layout's images go to the registries they name, and the
// kustomization written beside them goes to -k as it is. Neither the context nor the sources
// are read: the references, the digests and the objects were all fixed where the layout was
// written.
func (c *pushCommand) pushLayout(ctx context.Context, log *logrus.Logger) error {
	layout, err := image.ReadLayout(c.FromOCILayout)
	if err != nil {
		return fault.BadInput(err)
	}
	entries, err := layout.Entries()
	if err != nil {
		return fault.BadInput(err)
	}
	from := filepath.Join(c.FromOCILayout, "kustomization")
	files, err := readKustomization(from, entries)
	if err != nil {
		return err
	}
	reg, err := c.registries(log)
	if err != nil {
		return err
	}
	display := cli.NewDisplay(os.Stderr)
	result, err := image.PushLayout(ctx, layout, image.PushOptions{
		Registries: reg,
		Events:     func(e image.Event) { display.Set(e.Image, e.Message) },
	})
	if err != nil {
		return err
	}
	to := c.kustomizationDir()
	if err := manifest.WriteKustomization(to, files); err != nil {
		return err
	}
	log.Debugf("copied the kustomization from %s to %s", from, to)
	out := pushReport{Result: result, Kustomization: to, FromLayout: c.FromOCILayout}
	for _, e := range entries {
		out.Context, out.Environment = e.Annotations[image.AnnotationContext], e.Annotations[image.AnnotationEnvironment]
	}
	if c.Output == cli.JSON {
		return writePushJSON(os.Stdout, out)
	}
	return writePushText(os.Stdout, out)
}

// layoutKustomizationError says the layout's kustomization and its images disagree.
func layoutKustomizationError(dir, format string, args ...any) error {
	return fault.BadInputf("the kustomization in %s: %s; write the layout again with toa-push --oci-layout", dir, fmt.Sprintf(format, args...))
}

// readKustomization reads the kustomization in dir and makes sure that it pins every image by a
// digest that the layout holds for its repository, before anything is pushed.
func readKustomization(dir string, entries []image.LayoutEntry) (map[string][]byte, error) {
	if _, err := os.Stat(filepath.Join(dir, manifest.KustomizationFile)); err != nil {
		return nil, fault.BadInputf("the OCI layout has no kustomization beside its images: %w; write it with toa-push --oci-layout", err)
	}
	files, k, err := manifest.ReadKustomization(dir)
	if err != nil {
		return nil, err
	}
	if len(k.Images) == 0 {
		return nil, layoutKustomizationError(dir, "it names no image")
	}
	for _, img := range k.Images {
		if img.Digest == "" {
			return nil, layoutKustomizationError(dir, "%s is not pinned by a digest", img.Name)
		}
		found := false
		for _, e := range entries {
			if e.Repository() == img.Name && e.Digest == img.Digest {
				found = true
			}
		}
		if !found {
			return nil, layoutKustomizationError(dir, "it pins %s@%s, which the layout does not hold", img.Name, img.Digest)
		}
	}
	return files, nil
}
