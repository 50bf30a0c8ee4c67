package pipeline

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toa-deploy/toa-deploy/image"
	"github.com/toa-deploy/toa-deploy/manifest"
	"github.com/toa-deploy/toa-deploy/toa"
)

// Every image is pinned, by digest where the registry has it, else by tag; with a tag unknown,
// nothing is written.
func TestWriteKustomization(t *testing.T) {
	app, err := toa.Load(filepath.Join("..", "testdata", "apps", "derived"), "default")
	if err != nil {
		t.Fatal(err)
	}
	plan, err := image.NewPlan(app, image.PlanOptions{})
	if err != nil {
		t.Fatal(err)
	}
	objects, err := manifest.Objects(app, plan.ContainerImages())
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

	for _, img := range plan.Images {
		img.Tag = "0badc0de"
	}
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
		"  - name: localhost:5000/derived/composition-default-echo\n    newTag: 0badc0de\n",
		"  - name: localhost:5000/derived/composition-orders-orders\n    digest: " + digest + "\n",
		"      toa/context: derived\n    includeSelectors: false\n",
	} {
		if !strings.Contains(string(data), want) {
			t.Errorf("kustomization.yaml lacks\n%s\n%s", want, data)
		}
	}
}
