package layout

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/toa-deploy/toa-deploy/internal/app/toa"
	"github.com/toa-deploy/toa-deploy/internal/harness"
	"github.com/toa-deploy/toa-deploy/internal/push/image"
	"github.com/toa-deploy/toa-deploy/internal/registry"
	"github.com/toa-deploy/toa-deploy/layer"
)

// The helpers of image's tests that the layout's tests need too (package image cannot import
// layout, not even in its tests, so they are not shared): an application of two compositions
// built from fake layers, the registries, and what a registry's log says.

// fakeLayers makes small deterministic layers from the components' files, so that images are
// built without npm. The layer package has its own tests.
type fakeLayers struct{}

func (fakeLayers) Sources(components []*toa.Component) (v1.Layer, error) {
	files := map[string][]byte{}
	for _, c := range components {
		entries, _ := os.ReadDir(c.Path)
		for _, e := range entries {
			data, _ := os.ReadFile(filepath.Join(c.Path, e.Name()))
			files["composition/"+c.Locator.Label+"/"+e.Name()] = data
		}
	}
	return harness.TarLayer(files)
}

func (fakeLayers) Dependencies(_ context.Context, c *toa.Component, t image.Target, _ int) ([]v1.Layer, error) {
	if c.PackageJSON == "" {
		return nil, nil
	}
	pkg, _ := os.ReadFile(c.PackageJSON)
	l, err := harness.TarLayer(map[string][]byte{"composition/" + c.Locator.Label + "/node_modules/.installed": append(pkg, image.Platform(&t.Platform)...)})
	if err != nil {
		return nil, err
	}
	return []v1.Layer{l}, nil
}

func (fakeLayers) Global(context.Context, []string, image.Target) (v1.Layer, error) { return nil, nil }

// pushTo builds the application in dir on base and writes it to dest (nil: the registry its
// context names).
func pushTo(t *testing.T, dir, base string, dest image.Destination) (*image.Result, error) {
	t.Helper()
	reg, err := registry.NewRegistries()
	if err != nil {
		t.Fatal(err)
	}
	app, plan := loadAndPlan(t, dir, base, reg)
	return image.Push(context.Background(), app, plan, image.PushOptions{Registries: reg, Destination: dest, Layers: fakeLayers{}, CacheDir: t.TempDir()})
}

// loadAndPlan loads the application in dir and plans it on base.
func loadAndPlan(t *testing.T, dir, base string, reg *registry.Registries) (*toa.Application, *image.Plan) {
	t.Helper()
	app, err := toa.Load(dir, "default")
	if err != nil {
		t.Fatal(err)
	}
	resolved := image.ResolveBase(context.Background(), reg, base)
	if resolved.Err != nil {
		t.Fatal(resolved.Err)
	}
	plan, err := image.NewPlan(app, image.PlanOptions{Toolchain: layer.Toolchain{Node: "20", Npm: "11"}, Bases: map[string]*image.Base{base: resolved}})
	if err != nil {
		t.Fatal(err)
	}
	return app, plan
}

// registries are where a test's images and bases go: real ones (Debian's docker-registry, the
// test base of the machine's node), or go-containerregistry's in-memory one and a random base,
// which need nothing installed and run under -short.
type registries struct {
	registry func(testing.TB) string
	withLog  func(testing.TB) (string, *harness.Recorder)
	base     func(testing.TB, string) string
}

var (
	real   = registries{registry: harness.Registry, withLog: harness.RegistryWithLog, base: harness.PushTestBase}
	memory = registries{
		registry: harness.MemoryRegistry,
		withLog: func(t testing.TB) (string, *harness.Recorder) {
			addr, rec, _ := harness.MemoryRegistryWithLog(t)
			return addr, rec
		},
		base: func(t testing.TB, addr string) string {
			harness.PushRandomBase(t, addr+"/bases/random:test")
			return addr + "/bases/random:test"
		},
	}
)
