package harness

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
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
)

// The images, layers and contexts the image and layout tests build and read, in one place for
// both packages (image's own tests cannot import a helper that imports image).

// TarLayer is a layer of regular files, in the order of their names.
func TarLayer(files map[string][]byte) (v1.Layer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if err := tw.WriteHeader(&tar.Header{Name: n, Mode: 0o644, Size: int64(len(files[n])), Typeflag: tar.TypeReg}); err != nil {
			return nil, err
		}
		if _, err := tw.Write(files[n]); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	data := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil })
}

// twoCompositions writes an application of two compositions on the test base, for two platforms.
func TwoCompositions(t testing.TB, registry, base string) string {
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

// ReadIndex reads the index ref names from its registry.
func ReadIndex(t testing.TB, ref string) (v1.ImageIndex, *v1.IndexManifest) {
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

// FormatBase is a small base in the format given: the manifest's, the config's and the layers'
// media types, with an annotation where the format has them.
func FormatBase(t testing.TB, manifest, config, layer types.MediaType, arch string) v1.Image {
	t.Helper()
	img, err := mutate.ConfigFile(empty.Image, &v1.ConfigFile{OS: "linux", Architecture: arch, RootFS: v1.RootFS{Type: "layers"},
		Config: v1.Config{Env: []string{"NODE_VERSION=20.0.0"}}})
	if err != nil {
		t.Fatal(err)
	}
	img = mutate.ConfigMediaType(mutate.MediaType(img, manifest), config)
	l, err := TarLayer(map[string][]byte{"usr/local/bin/node": []byte("node of " + arch)})
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

// OneImage is an index of media type mt holding img for linux/arch.
func OneImage(mt types.MediaType, img v1.Image, arch string) v1.ImageIndex {
	return mutate.AppendManifests(mutate.IndexMediaType(empty.Index, mt),
		mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: arch}}})
}

// DistinctBlobs walks every tag of the registry's repositories and returns the size of each
// distinct blob (configs and layers) their images hold.
func DistinctBlobs(t testing.TB, addr string) map[string]int64 {
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
