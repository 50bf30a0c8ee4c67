package pipeline

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toa-deploy/toa-deploy/internal/app/toa"
	"github.com/toa-deploy/toa-deploy/internal/push/image"
	"github.com/toa-deploy/toa-deploy/manifest"
)

// Every image is pinned, by digest where the registry has it, else by tag; with a tag unknown,
// nothing is written.
func TestWriteKustomization(t *testing.T) {
	app, err := toa.Load(filepath.Join("..", "..", "..", "testdata", "apps", "derived"), "default")
	if err != nil {
		t.Fatal(err)
	}
	plan, err := image.NewPlan(app, image.PlanOptions{})
	if err != nil {
		t.Fatal(err)
	}
	objects, err := manifest.Objects(app, workloadImages(plan, false))
	if err != nil {
		t.Fatal(err)
	}
	p := &Planned{App: app, Plan: plan, Objects: objects}
	dir := filepath.Join(t.TempDir(), "deployment")
	var notWritten *NotWrittenError
	if err := writeKustomization(p, dir, nil); !errors.As(err, &notWritten) {
		t.Fatalf("unresolved tags: %v", err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("written without tags: %v", err)
	}

	// The same application planned on a resolved base: every tag is known.
	ref := image.DefaultBase + ":" + app.Runtime.Version
	base := &image.Base{Ref: ref, Source: ref, Digest: "sha256:" + strings.Repeat("0b", 32), Platforms: map[string]string{
		"linux/amd64": "sha256:" + strings.Repeat("1a", 32), "linux/arm/v7": "sha256:" + strings.Repeat("2a", 32), "linux/arm64": "sha256:" + strings.Repeat("3a", 32)}}
	plan, err = image.NewPlan(app, image.PlanOptions{Bases: map[string]*image.Base{ref: base}})
	if err != nil {
		t.Fatal(err)
	}
	var echo string
	for _, img := range plan.Images() {
		if img.Tag == "" {
			t.Fatalf("%s: no tag on a resolved base: %s", img.Name, img.Unresolved)
		}
		if img.Name == "composition-default-echo" {
			echo = img.Tag
		}
	}
	p = &Planned{App: app, Plan: plan, Objects: objects}
	digest := "sha256:" + strings.Repeat("ab", 32)
	digests := map[string]string{"localhost:5000/derived/composition-orders-orders": digest}
	if err := writeKustomization(p, dir, digests); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"  - name: localhost:5000/derived/composition-default-echo\n    newTag: " + echo + "\n",
		"  - name: localhost:5000/derived/composition-orders-orders\n    digest: " + digest + "\n",
		"      toa/context: derived\n    includeSelectors: false\n",
	} {
		if !strings.Contains(string(data), want) {
			t.Errorf("kustomization.yaml lacks\n%s\n%s", want, data)
		}
	}
}
