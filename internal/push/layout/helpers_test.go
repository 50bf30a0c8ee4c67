package layout

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

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

func tarLayer(files map[string][]byte) (v1.Layer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	var names []string
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if err := tw.WriteHeader(&tar.Header{Name: n, Mode: 0o644, Size: int64(len(files[n])), Typeflag: tar.TypeReg}); err != nil {
			return nil, err
		}
		tw.Write(files[n])
	}
	tw.Close()
	data := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil })
}

func (fakeLayers) Sources(components []*toa.Component) (v1.Layer, error) {
	files := map[string][]byte{}
	for _, c := range components {
		entries, _ := os.ReadDir(c.Path)
		for _, e := range entries {
			data, _ := os.ReadFile(filepath.Join(c.Path, e.Name()))
			files["composition/"+c.Locator.Label+"/"+e.Name()] = data
		}
	}
	return tarLayer(files)
}

func (fakeLayers) Dependencies(_ context.Context, c *toa.Component, t image.Target, _ int) ([]v1.Layer, error) {
	if c.PackageJSON == "" {
		return nil, nil
	}
	pkg, _ := os.ReadFile(c.PackageJSON)
	l, err := tarLayer(map[string][]byte{"composition/" + c.Locator.Label + "/node_modules/.installed": append(pkg, image.Platform(&t.Platform)...)})
	if err != nil {
		return nil, err
	}
	return []v1.Layer{l}, nil
}

func (fakeLayers) Global(context.Context, []string, image.Target) (v1.Layer, error) { return nil, nil }

// twoCompositions writes an application of two compositions on the test base, for two platforms.
func twoCompositions(t *testing.T, registry, base string) string {
	dir := t.TempDir()
	files := map[string]string{
		"context.toa.yaml": "name: shop\nruntime: 1.0.0-alpha.289\nregistry:\n  base: " + registry +
			"\n  platforms: [linux/amd64, linux/arm64]\n  build:\n    image: " + base +
			"\ncompositions:\n  - name: front\n    components: [shop.orders]\n  - name: back\n    components: [shop.prices]\n",
		"components/shop.orders/manifest.toa.yaml": "operations: {}\n",
		"components/shop.orders/package.json":      `{"name":"orders","dependencies":{"a":"1"}}`,
		"components/shop.orders/index.js":          "exports.a = 1\n",
		"components/shop.prices/manifest.toa.yaml": "operations: {}\n",
		"components/shop.prices/package.json":      `{"name":"prices","dependencies":{"b":"1"}}`,
		"components/shop.prices/index.js":          "exports.b = 1\n",
	}
	for p, content := range files {
		full := filepath.Join(dir, p)
		os.MkdirAll(filepath.Dir(full), 0o755)
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

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

func readIndex(t *testing.T, ref string) (v1.ImageIndex, *v1.IndexManifest) {
	t.Helper()
	r, err := name.ParseReference(ref)
	if err != nil {
		t.Fatal(err)
	}
	idx, err := remote.Index(r)
	if err != nil {
		t.Fatal(err)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	return idx, m
}

// memoryBase is a small base in the format given: the manifest's, the config's and the layers'
// media types, with an annotation where the format has them.
func memoryBase(t *testing.T, manifest, config, layer types.MediaType, arch string) v1.Image {
	t.Helper()
	img, err := mutate.ConfigFile(empty.Image, &v1.ConfigFile{OS: "linux", Architecture: arch, RootFS: v1.RootFS{Type: "layers"},
		Config: v1.Config{Env: []string{"NODE_VERSION=20.0.0"}}})
	if err != nil {
		t.Fatal(err)
	}
	img = mutate.ConfigMediaType(mutate.MediaType(img, manifest), config)
	l, err := tarLayer(map[string][]byte{"usr/local/bin/node": []byte("node of " + arch)})
	if err != nil {
		t.Fatal(err)
	}
	img, err = mutate.Append(img, mutate.Addendum{Layer: l, MediaType: layer})
	if err != nil {
		t.Fatal(err)
	}
	if manifest == types.OCIManifestSchema1 {
		img = mutate.Annotations(img, map[string]string{"org.opencontainers.image.version": "20.0.0"}).(v1.Image)
	}
	return img
}

func oneImage(mt types.MediaType, img v1.Image, arch string) v1.ImageIndex {
	return mutate.AppendManifests(mutate.IndexMediaType(empty.Index, mt),
		mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: arch}}})
}

// distinctBlobs walks every tag of the registry's repositories and returns the size of each
// distinct blob (configs and layers) their images hold.
func distinctBlobs(t *testing.T, addr string) map[string]int64 {
	t.Helper()
	reg, err := name.NewRegistry(addr, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	repos, err := remote.Catalog(context.Background(), reg)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, repo := range repos {
		tags, err := remote.List(reg.Repo(repo))
		if err != nil {
			continue // blobs only
		}
		for _, tag := range tags {
			idx, err := remote.Index(reg.Repo(repo).Tag(tag))
			if err != nil {
				t.Fatal(err)
			}
			m, _ := idx.IndexManifest()
			for _, d := range m.Manifests {
				img, err := idx.Image(d.Digest)
				if err != nil {
					t.Fatal(err)
				}
				im, _ := img.Manifest()
				for _, b := range append([]v1.Descriptor{im.Config}, im.Layers...) {
					out[b.Digest.String()] = b.Size
				}
			}
		}
	}
	return out
}

// uploads returns the digests of the completed blob uploads and the bytes of each.
func uploads(rec *harness.Recorder) (count map[string]int, bytes int64) {
	count = map[string]int{}
	for _, r := range rec.BlobUploads() {
		q, _ := url.ParseQuery(r.Query)
		if r.Status == http.StatusCreated {
			count[q.Get("digest")]++
			bytes += r.Bytes
		}
	}
	return count, bytes
}

func pings(rec *harness.Recorder) int {
	return len(rec.Filter(func(r harness.Request) bool { return r.Method == http.MethodGet && r.Path == "/v2/" }))
}
