package image

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/toa-deploy/toa-deploy/internal/app/toa"
	"github.com/toa-deploy/toa-deploy/internal/harness"
	"github.com/toa-deploy/toa-deploy/internal/registry"
	"github.com/toa-deploy/toa-deploy/layer"
)

// fakeLayers makes small deterministic layers from the components' files, so that the push logic
// is tested against a real registry without npm. The layer package has its own tests.
type fakeLayers struct {
	failSources string // a component id whose sources fail
}

func (f fakeLayers) Sources(components []*toa.Component) (v1.Layer, error) {
	files := map[string][]byte{}
	for _, c := range components {
		if c.Locator.ID == f.failSources {
			return nil, errors.New("the disk is on fire")
		}
		entries, _ := os.ReadDir(c.Path)
		for _, e := range entries {
			data, _ := os.ReadFile(filepath.Join(c.Path, e.Name()))
			files["composition/"+c.Locator.Label+"/"+e.Name()] = data
		}
	}
	return harness.TarLayer(files)
}

func (fakeLayers) Dependencies(_ context.Context, c *toa.Component, t Target, _ int) ([]v1.Layer, error) {
	if c.PackageJSON == "" {
		return nil, nil
	}
	pkg, _ := os.ReadFile(c.PackageJSON)
	l, err := harness.TarLayer(map[string][]byte{"composition/" + c.Locator.Label + "/node_modules/.installed": append(pkg, Platform(&t.Platform)...)})
	if err != nil {
		return nil, err
	}
	return []v1.Layer{l}, nil
}

func (fakeLayers) Global(context.Context, []string, Target) (v1.Layer, error) { return nil, nil }

func pushOnce(t *testing.T, dir, base string, layers Layers) (*Result, error) {
	t.Helper()
	app, err := toa.Load(dir, "default")
	if err != nil {
		t.Fatal(err)
	}
	reg, err := registry.NewRegistries()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	resolved := ResolveBase(ctx, reg, base)
	if resolved.Err != nil {
		t.Fatal(resolved.Err)
	}
	plan, err := NewPlan(app, PlanOptions{Toolchain: layer.Toolchain{Node: "20", Npm: "11"}, Bases: map[string]*Base{base: resolved}})
	if err != nil {
		t.Fatal(err)
	}
	return Push(ctx, app, plan, PushOptions{Registries: reg, Layers: layers, CacheDir: t.TempDir()})
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

func TestPushAgainstARealRegistry(t *testing.T) { testPush(t, real) }

func TestPushAgainstTheMemoryRegistry(t *testing.T) { testPush(t, memory) }

// testPush: a first push, a push with no change, a code change, a failed push and its rerun.
func testPush(t *testing.T, r registries) {
	addr, rec := r.withLog(t)
	base := r.base(t, addr)
	dir := harness.TwoCompositions(t, addr, base)

	rec.Reset()
	first, err := pushOnce(t, dir, base, fakeLayers{})
	if err != nil {
		t.Fatal(err)
	}
	if len(first.Images) != 2 || !first.Images[0].Built || !first.Images[0].DepsBuilt {
		t.Fatalf("first push: %+v", first.Images[0])
	}
	t.Run("the index reads back with both platforms", func(t *testing.T) {
		ref, _ := name.ParseReference(first.Images[0].Reference())
		idx, err := remote.Index(ref)
		if err != nil {
			t.Fatal(err)
		}
		m, _ := idx.IndexManifest()
		if len(m.Manifests) != 2 || Platform(m.Manifests[0].Platform) != "linux/amd64" || Platform(m.Manifests[1].Platform) != "linux/arm64" {
			t.Fatalf("index: %+v", m.Manifests)
		}
		img, _ := idx.Image(m.Manifests[0].Digest)
		cfg, _ := img.ConfigFile()
		if strings.Join(cfg.Config.Cmd, " ") != "toa compose shop-orders" || cfg.Config.WorkingDir != "/composition" ||
			envOf(cfg, "NODE_ENV") != "production" || cfg.Config.User != "" {
			t.Errorf("config: %+v", cfg.Config)
		}
		// the sources layer is the same blob on both platforms
		a, _ := img.Layers()
		other, _ := idx.Image(m.Manifests[1].Digest)
		b, _ := other.Layers()
		da, _ := a[len(a)-1].Digest()
		db, _ := b[len(b)-1].Digest()
		if da != db {
			t.Errorf("sources layers differ across platforms: %s %s", da, db)
		}
	})

	t.Run("a second push sends nothing", func(t *testing.T) {
		rec.Reset()
		again, err := pushOnce(t, dir, base, fakeLayers{})
		if err != nil {
			t.Fatal(err)
		}
		if again.Images[0].Built || again.Images[0].Digest != first.Images[0].Digest {
			t.Errorf("no-change push: %+v", again.Images[0])
		}
		t.Logf("no change: %d requests, %d bytes sent", len(rec.Requests()), rec.BytesSent())
		if n := len(rec.BlobUploads()); n != 0 {
			t.Errorf("%d blobs uploaded", n)
		}
		if n := len(rec.Filter(harness.Request.IsManifestPut)); n != 0 {
			t.Errorf("%d manifests written", n)
		}
		heads := rec.Filter(func(r harness.Request) bool { return r.Method == "HEAD" && strings.Contains(r.Path, "/composition-") })
		if len(heads) != 2 {
			t.Errorf("%d HEADs of the images, want one each", len(heads))
		}
	})

	t.Run("a code change sends one layer, configs, manifests and the index", func(t *testing.T) {
		os.WriteFile(filepath.Join(dir, "components/shop.orders/index.js"), []byte("exports.a = 2\n"), 0o644)
		rec.Reset()
		changed, err := pushOnce(t, dir, base, fakeLayers{})
		if err != nil {
			t.Fatal(err)
		}
		if !changed.Images[0].Built || changed.Images[0].DepsBuilt || changed.Images[1].Built {
			t.Fatalf("code change: %+v %+v", changed.Images[0], changed.Images[1])
		}
		t.Logf("code change: %d requests, %d bytes sent (%d counted by toa-push)", len(rec.Requests()), rec.BytesSent(), changed.Images[0].BytesSent)
		// one sources layer and two configs; two manifests and the index
		if n := len(rec.BlobUploads()); n != 3 {
			t.Errorf("%d blobs uploaded, want 3: %+v", n, rec.BlobUploads())
		}
		if n := len(rec.Filter(harness.Request.IsManifestPut)); n != 3 {
			t.Errorf("%d manifests written, want 3", n)
		}
	})

	t.Run("a failed push leaves no tag, and a rerun finishes", func(t *testing.T) {
		os.WriteFile(filepath.Join(dir, "components/shop.prices/index.js"), []byte("exports.b = 2\n"), 0o644)
		_, err := pushOnce(t, dir, base, fakeLayers{failSources: "shop.prices"})
		if err == nil || !strings.Contains(err.Error(), "on fire") {
			t.Fatalf("push with a failing layer: %v", err)
		}
		app, _ := toa.Load(dir, "default")
		reg, _ := registry.NewRegistries()
		plan, _ := NewPlan(app, PlanOptions{Toolchain: layer.Toolchain{Node: "20", Npm: "11"}, Bases: map[string]*Base{base: ResolveBase(context.Background(), reg, base)}})
		ref, _ := name.ParseReference(plan.images[1].Reference())
		if _, err := remote.Head(ref); err == nil {
			t.Errorf("%s exists after a failed push", ref)
		}
		done, err := pushOnce(t, dir, base, fakeLayers{})
		if err != nil || !done.Images[1].Built {
			t.Errorf("rerun: %v %+v", err, done.Images[1])
		}
	})
}

// pushWith resolves the base and pushes the application in dir with reg.
func pushWith(ctx context.Context, t *testing.T, dir, base string, reg *registry.Registries) (*Result, error) {
	t.Helper()
	app, err := toa.Load(dir, "default")
	if err != nil {
		t.Fatal(err)
	}
	resolved := ResolveBase(ctx, reg, base)
	if resolved.Err != nil {
		return nil, resolved.Err
	}
	plan, err := NewPlan(app, PlanOptions{Toolchain: layer.Toolchain{Node: "20", Npm: "11"}, Bases: map[string]*Base{base: resolved}})
	if err != nil {
		t.Fatal(err)
	}
	return Push(ctx, app, plan, PushOptions{Registries: reg, Layers: fakeLayers{}, CacheDir: t.TempDir()})
}
