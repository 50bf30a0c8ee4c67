package image

import (
	"path/filepath"
	"testing"

	"github.com/toa-deploy/toa-deploy/internal/app/toa"
	"github.com/toa-deploy/toa-deploy/internal/fault"
	"github.com/toa-deploy/toa-deploy/layer"
)

func TestTagVector(t *testing.T) {
	// Toa's own vector (image.test.js): runtime 0.0.0, version 168b04ff
	if got := Tag("0.0.0", "168b04ff"); got != "ba2409fc" {
		t.Errorf("Tag = %s, want ba2409fc", got)
	}
}

func fakeBase(ref string, platforms ...string) *Base {
	b := &Base{Ref: ref, Digest: "sha256:index", Platforms: map[string]string{}}
	for _, p := range platforms {
		b.Platforms[p] = "sha256:" + p
	}
	return b
}

func planOf(t *testing.T, app *toa.Application, bases map[string]*Base) *Plan {
	t.Helper()
	p, err := NewPlan(app, PlanOptions{Toolchain: layer.Toolchain{Node: "20.0.0", Npm: "11.0.0"}, Bases: bases})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestPlanNamesEveryImage(t *testing.T) {
	app, err := toa.Load(filepath.Join("..", "..", "..", "testdata", "apps", "declared"), "default")
	if err != nil {
		t.Fatal(err)
	}
	runtime := DefaultBase + ":1.0.0-alpha.289"
	bases := map[string]*Base{
		runtime:                          fakeBase(runtime, "linux/amd64", "linux/arm64"),
		"localhost:5000/bases/node:test": fakeBase("localhost:5000/bases/node:test", "linux/amd64", "linux/arm64"),
	}
	p := planOf(t, app, bases)
	if len(p.images) != 3 {
		t.Fatalf("%d images", len(p.images))
	}
	front := p.images[0]
	if front.Repository != "localhost:5000/acme/shop/composition-front" || front.Base != runtime {
		t.Errorf("front: %+v", front)
	}
	if len(front.Tag) != 8 || len(front.DepsTag) != len("deps-")+8 || front.Unresolved != "" {
		t.Errorf("front tags: %q %q %q", front.Tag, front.DepsTag, front.Unresolved)
	}
	if back := p.images[1]; back.Base != "localhost:5000/bases/node:test" || back.BaseFrom != "the composition's image" {
		t.Errorf("back's base: %+v", back)
	}

	again := planOf(t, app, bases)
	if again.images[0].Tag != front.Tag {
		t.Error("the same inputs gave another tag")
	}

	moved := map[string]*Base{runtime: fakeBase(runtime, "linux/amd64", "linux/arm64"), "localhost:5000/bases/node:test": bases["localhost:5000/bases/node:test"]}
	moved[runtime].Platforms["linux/amd64"] = "sha256:another"
	if other := planOf(t, app, moved); other.images[0].DepsTag == front.DepsTag || other.images[0].Tag == front.Tag {
		t.Error("another base digest kept the same tags")
	}
}

func TestPlanWithoutBasesSaysSo(t *testing.T) {
	app, err := toa.Load(filepath.Join("..", "..", "..", "testdata", "apps", "derived"), "default")
	if err != nil {
		t.Fatal(err)
	}
	p := planOf(t, app, nil)
	for _, img := range p.images {
		if img.Tag != "" || img.Reference() != "" || img.Unresolved == "" {
			t.Errorf("%s: invented a tag %q without its base", img.Name, img.Tag)
		}
	}
}

func TestPlatformsTheBaseLacks(t *testing.T) {
	app, err := toa.Load(filepath.Join("..", "..", "..", "testdata", "apps", "derived"), "default")
	if err != nil {
		t.Fatal(err)
	}
	runtime := DefaultBase + ":1.0.0-alpha.289"
	// defaulted platforms: arm/v7 is left out with a warning
	p := planOf(t, app, map[string]*Base{runtime: fakeBase(runtime, "linux/amd64", "linux/arm64")})
	if got := p.images[0].Platforms; len(got) != 2 || len(p.warnings) != 1 {
		t.Errorf("platforms %v, warnings %v", got, p.warnings)
	}
	// named platforms: refused
	app.Registry.PlatformsDefaulted = false
	_, err = NewPlan(app, PlanOptions{Bases: map[string]*Base{runtime: fakeBase(runtime, "linux/amd64")}})
	if !fault.IsInput(err) {
		t.Errorf("a named platform the base lacks: %v", err)
	}
}
