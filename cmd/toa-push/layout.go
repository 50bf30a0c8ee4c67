package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/sirupsen/logrus"
	"sigs.k8s.io/yaml"

	"github.com/toa-deploy/toa-deploy/fault"
	"github.com/toa-deploy/toa-deploy/image"
	"github.com/toa-deploy/toa-deploy/internal/cli"
	"github.com/toa-deploy/toa-deploy/kustomize"
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
	if err := checkKustomization(from, entries); err != nil {
		return fault.BadInput(err)
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
	if err := copyKustomization(from, to); err != nil {
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
	return fmt.Errorf("the kustomization in %s: %s; write the layout again with toa-push --oci-layout", dir, fmt.Sprintf(format, args...))
}

// checkKustomization makes sure that the kustomization in dir pins every image by a digest that
// the layout holds for its repository, before anything is pushed.
func checkKustomization(dir string, entries []image.LayoutEntry) error {
	data, err := os.ReadFile(filepath.Join(dir, kustomize.KustomizationFile))
	if err != nil {
		return fmt.Errorf("the OCI layout has no kustomization beside its images: %w; write it with toa-push --oci-layout", err)
	}
	var k struct {
		Images []struct {
			Name   string `json:"name"`
			Digest string `json:"digest"`
		} `json:"images"`
	}
	if err := yaml.Unmarshal(data, &k); err != nil {
		return layoutKustomizationError(dir, "%v", err)
	}
	if len(k.Images) == 0 {
		return layoutKustomizationError(dir, "it names no image")
	}
	for _, img := range k.Images {
		if img.Digest == "" {
			return layoutKustomizationError(dir, "%s is not pinned by a digest", img.Name)
		}
		found := false
		for _, e := range entries {
			if e.Repository() == img.Name && e.Digest == img.Digest {
				found = true
			}
		}
		if !found {
			return layoutKustomizationError(dir, "it pins %s@%s, which the layout does not hold", img.Name, img.Digest)
		}
	}
	return nil
}

// writtenByToaPush opens every kustomization.yaml toa-push writes (kustomize.Write).
const writtenByToaPush = "# Written by toa-push"

// copyKustomization copies the kustomization in from (a flat folder) to to, as kustomize.Write
// replaces one: written beside it first and moved into place whole; a folder that holds anything
// but a kustomization toa-push wrote is left alone.
func copyKustomization(from, to string) error {
	entries, err := os.ReadDir(from)
	if err != nil {
		return err
	}
	abs, err := filepath.Abs(to)
	if err != nil {
		return err
	}
	existing, err := os.ReadDir(abs)
	switch {
	case errors.Is(err, os.ErrNotExist), err == nil && len(existing) == 0:
	case err != nil:
		return &fault.Input{File: to, Message: "is not a folder toa-push can write the kustomization into: " + err.Error(),
			Hint: "give --kustomization a folder of its own, like `deployment`"}
	default:
		data, err := os.ReadFile(filepath.Join(abs, kustomize.KustomizationFile))
		if err != nil || !bytes.HasPrefix(data, []byte(writtenByToaPush)) {
			return &fault.Input{File: to, Message: "holds files toa-push did not write: toa-push writes the kustomization there, and would replace it",
				Hint: "give --kustomization a folder of its own, like `deployment`, or remove this one"}
		}
	}
	if err := os.MkdirAll(filepath.Dir(abs), 0o755); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(filepath.Dir(abs), "."+filepath.Base(abs)+".new-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	if err := os.Chmod(tmp, 0o755); err != nil {
		return err
	}
	for _, e := range entries {
		if !e.Type().IsRegular() {
			return fmt.Errorf("the kustomization in %s holds %s, which is not a file", from, e.Name())
		}
		data, err := os.ReadFile(filepath.Join(from, e.Name()))
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(tmp, e.Name()), data, 0o644); err != nil {
			return err
		}
	}
	old := tmp + ".old"
	if _, err := os.Stat(abs); err == nil {
		if err := os.Rename(abs, old); err != nil {
			return fmt.Errorf("write the kustomization: move the old one aside: %w", err)
		}
		defer os.RemoveAll(old)
	}
	if err := os.Rename(tmp, abs); err != nil {
		if _, statErr := os.Stat(old); statErr == nil {
			os.Rename(old, abs)
		}
		return fmt.Errorf("write the kustomization: %w", err)
	}
	return nil
}
