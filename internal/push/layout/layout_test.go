package layout

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/toa-deploy/toa-deploy/internal/harness"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/toa-deploy/toa-deploy/internal/app/toa"
	"github.com/toa-deploy/toa-deploy/internal/push/image"
	"github.com/toa-deploy/toa-deploy/internal/registry"
	"github.com/toa-deploy/toa-deploy/layer"
)

// An OCI layout holds every index of the application with every blob of its images, the base's
// layers included; pushed to the registry later, it gives the digests a push straight to the
// registry gives, and contacts no registry but the base's while it is written.
func TestLayoutThenRegistry(t *testing.T) { testLayoutThenRegistry(t, real) }

func TestLayoutThenTheMemoryRegistry(t *testing.T) { testLayoutThenRegistry(t, memory) }

func testLayoutThenRegistry(t *testing.T, r registries) {
	origin := r.registry(t)
	base := r.base(t, origin)
	target, targetLog := r.withLog(t)
	dir := harness.TwoCompositions(t, target, base)
	app, err := toa.Load(dir, "default")
	if err != nil {
		t.Fatal(err)
	}
	reg, _ := registry.NewRegistries()
	ctx := context.Background()
	plan, err := image.NewPlan(app, image.PlanOptions{Toolchain: layer.Toolchain{Node: "20", Npm: "11"}, Bases: map[string]*image.Base{base: image.ResolveBase(ctx, reg, base)}})
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "out")
	l, err := Open(out, map[string]string{AnnotationContext: app.Name, AnnotationEnvironment: "default"})
	if err != nil {
		t.Fatal(err)
	}
	targetLog.Reset()
	written, err := image.Push(ctx, app, plan, image.PushOptions{Registries: reg, Destination: l, Layers: fakeLayers{}, CacheDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(targetLog.Requests()); n != 0 {
		t.Errorf("writing the layout asked the target registry %d times", n)
	}
	entries, err := l.Entries()
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 4 { // two compositions, each with its dependencies image
		t.Fatalf("%d entries: %+v", len(entries), entries)
	}
	for _, e := range entries {
		if e.Annotations[AnnotationContext] != "shop" || e.Annotations[AnnotationRefName] == "" {
			t.Errorf("entry %+v", e)
		}
		idx, err := l.index(e.Digest)
		if err != nil {
			t.Fatal(err)
		}
		allBlobs(t, out, idx)
	}

	t.Run("a second write writes nothing", func(t *testing.T) {
		again, err := image.Push(ctx, app, plan, image.PushOptions{Registries: reg, Destination: l, Layers: fakeLayers{}, CacheDir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		for i, p := range again.Images {
			if p.Built || p.Digest != written.Images[i].Digest {
				t.Errorf("%+v", p)
			}
		}
	})

	t.Run("pushed from the layout, the digests of a direct push", func(t *testing.T) {
		read, err := Read(out)
		if err != nil {
			t.Fatal(err)
		}
		pushed, err := Push(ctx, read, image.PushOptions{Registries: reg})
		if err != nil {
			t.Fatal(err)
		}
		direct := r.registry(t)
		other := harness.TwoCompositions(t, direct, base)
		straight, err := pushTo(t, other, base, nil)
		if err != nil {
			t.Fatal(err)
		}
		byName := func(r *image.Result) map[string]string {
			out := map[string]string{}
			for _, p := range r.Images {
				out[p.Name] = p.Digest
			}
			return out
		}
		inLayout, straightDigests := byName(written), byName(straight)
		if len(pushed.Images) != 2 {
			t.Fatalf("%d images pushed", len(pushed.Images))
		}
		for _, p := range pushed.Images {
			if !p.Copied || p.Digest != inLayout[p.Name] || p.Digest != straightDigests[p.Name] || len(p.Platforms) != 2 {
				t.Errorf("%+v: layout %s, direct %s", p, inLayout[p.Name], straightDigests[p.Name])
			}
			if _, m := harness.ReadIndex(t, p.Reference()); len(m.Manifests) != 2 {
				t.Errorf("%s reads back with %d manifests", p.Reference(), len(m.Manifests))
			}
		}
		targetLog.Reset()
		again, err := Push(ctx, read, image.PushOptions{Registries: reg})
		if err != nil {
			t.Fatal(err)
		}
		if again.Images[0].Copied || len(targetLog.BlobUploads()) != 0 || len(targetLog.ManifestPuts()) != 0 {
			t.Errorf("a second push from the layout sent %d blobs, %d manifests", len(targetLog.BlobUploads()), len(targetLog.ManifestPuts()))
		}
	})

	t.Run("a folder that is not a layout is refused", func(t *testing.T) {
		d := t.TempDir()
		os.WriteFile(filepath.Join(d, "notes.txt"), []byte("mine"), 0o644)
		if _, err := Open(d, nil); err == nil {
			t.Error("wrote into a folder of someone else's")
		}
	})
}

// allBlobs checks that the layout holds every blob the index names, down to the layers.
func allBlobs(t *testing.T, dir string, idx v1.ImageIndex) {
	t.Helper()
	blob := func(h v1.Hash) {
		if _, err := os.Stat(filepath.Join(dir, "blobs", h.Algorithm, h.Hex)); err != nil {
			t.Errorf("blob %s missing", h)
		}
	}
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range m.Manifests {
		blob(d.Digest)
		img, err := idx.Image(d.Digest)
		if err != nil {
			t.Fatal(err)
		}
		mf, err := img.Manifest()
		if err != nil {
			t.Fatal(err)
		}
		blob(mf.Config.Digest)
		for _, l := range mf.Layers {
			blob(l.Digest)
		}
	}
}
