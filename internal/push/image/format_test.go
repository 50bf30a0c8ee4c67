package image

import (
	"context"
	"net/http"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/toa-deploy/toa-deploy/internal/harness"
	"github.com/toa-deploy/toa-deploy/internal/registry"
)

// built is what Push makes of one platform of a base: the dependencies image, the sources over
// it, and the index of both platforms.
func built(t *testing.T, bases ...v1.Image) v1.ImageIndex {
	t.Helper()
	var images []v1.Image
	var targets []Target
	for _, b := range bases {
		base, err := baseAsOCI(b, "the base")
		if err != nil {
			t.Fatal(err)
		}
		cfg, _ := base.ConfigFile()
		deps, err := dependencyImage(t.Context(), base, &Image{}, nil, Target{Platform: *cfg.Platform()}, fakeLayers{}, v1.Time{})
		if err != nil {
			t.Fatal(err)
		}
		l, _ := harness.TarLayer(map[string][]byte{"composition/a/index.js": []byte("1")})
		img, err := sourcesImage(deps, []v1.Layer{l}, []string{"toa", "compose", "a"}, v1.Time{})
		if err != nil {
			t.Fatal(err)
		}
		images, targets = append(images, img), append(targets, Target{Platform: *cfg.Platform()})
	}
	idx, err := index(images, targets, map[string]string{AnnotationBaseName: "node:20"})
	if err != nil {
		t.Fatal(err)
	}
	return idx
}

func TestImagesAreOCIOnEveryBase(t *testing.T) {
	for _, tc := range []struct {
		name                    string
		manifest, config, layer types.MediaType
	}{
		{"OCI", types.OCIManifestSchema1, types.OCIConfigJSON, types.OCILayer},
		{"OCI with zstd layers", types.OCIManifestSchema1, types.OCIConfigJSON, types.OCILayerZStd},
		{"Docker v2", types.DockerManifestSchema2, types.DockerConfigJSON, types.DockerLayer},
		{"Docker v2 with an uncompressed layer", types.DockerManifestSchema2, types.DockerConfigJSON, types.DockerUncompressedLayer},
		{"OCI manifest of Docker layers", types.OCIManifestSchema1, types.OCIConfigJSON, types.DockerLayer},
	} {
		t.Run(tc.name, func(t *testing.T) {
			amd64 := harness.FormatBase(t, tc.manifest, tc.config, tc.layer, "amd64")
			arm64 := harness.FormatBase(t, tc.manifest, tc.config, tc.layer, "arm64")
			idx := built(t, amd64, arm64)
			if err := CheckOCI(idx); err != nil {
				t.Fatal(err)
			}
			m, _ := idx.IndexManifest()
			img, _ := idx.Image(m.Manifests[0].Digest)
			got, _ := img.Manifest()
			if len(got.Annotations) != 0 {
				t.Errorf("the base's annotations were carried into the image: %v", got.Annotations)
			}
			baseManifest, _ := amd64.Manifest()
			if got.Layers[0].Digest != baseManifest.Layers[0].Digest {
				t.Errorf("the base's layer is %s in the image, %s in the base", got.Layers[0].Digest, baseManifest.Layers[0].Digest)
			}
		})
	}
}

// An OCI base with no annotations of its own gives the digests it gave before asOCI: the
// golden digests of images on OCI bases do not move.
func TestOCIBaseKeepsItsDigests(t *testing.T) {
	plain := memoryBaseWithout(t)
	converted, err := baseAsOCI(plain, "the base")
	if err != nil {
		t.Fatal(err)
	}
	l, _ := harness.TarLayer(map[string][]byte{"a": []byte("a")})
	before, _ := mutate.Append(plain, mutate.Addendum{Layer: l, MediaType: types.OCILayer})
	after, _ := mutate.Append(converted, mutate.Addendum{Layer: l, MediaType: types.OCILayer})
	if a, b := digest(t, before), digest(t, after); a != b {
		t.Errorf("on an OCI base: %s before, %s after the conversion", a, b)
	}
}

func memoryBaseWithout(t *testing.T) v1.Image {
	t.Helper()
	img, err := mutate.ConfigFile(empty.Image, &v1.ConfigFile{OS: "linux", Architecture: "amd64", RootFS: v1.RootFS{Type: "layers"}})
	if err != nil {
		t.Fatal(err)
	}
	img = mutate.ConfigMediaType(mutate.MediaType(img, types.OCIManifestSchema1), types.OCIConfigJSON)
	l, _ := harness.TarLayer(map[string][]byte{"usr/local/bin/node": []byte("node")})
	img, err = mutate.Append(img, mutate.Addendum{Layer: l, MediaType: types.OCILayer})
	if err != nil {
		t.Fatal(err)
	}
	return img
}

func digest(t *testing.T, img v1.Image) string {
	t.Helper()
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d.String()
}

func TestBasesThatCannotBeCarried(t *testing.T) {
	foreign := harness.FormatBase(t, types.DockerManifestSchema2, types.DockerConfigJSON, types.DockerForeignLayer, "amd64")
	if _, err := baseAsOCI(foreign, "the base mcr.microsoft.com/windows"); err == nil || !strings.Contains(err.Error(), "vnd.docker.image.rootfs.foreign.diff.tar.gzip") {
		t.Errorf("a foreign layer: %v", err)
	}
	artifact := mutate.ConfigMediaType(harness.FormatBase(t, types.OCIManifestSchema1, types.OCIConfigJSON, types.OCILayer, "amd64"), "application/vnd.cncf.helm.config.v1+json")
	if _, err := baseAsOCI(artifact, "the base"); err == nil || !strings.Contains(err.Error(), "is not an image") {
		t.Errorf("an artifact: %v", err)
	}
}

func TestCheckOCIRefusesMixedFormats(t *testing.T) {
	docker := harness.FormatBase(t, types.DockerManifestSchema2, types.DockerConfigJSON, types.DockerLayer, "amd64")
	l, _ := harness.TarLayer(map[string][]byte{"a": []byte("a")})
	// what toa-push wrote before it converted: a Docker manifest with an OCI layer, in an OCI index
	mixed, _ := mutate.Append(docker, mutate.Addendum{Layer: l, MediaType: types.OCILayer})
	annotated := mutate.Annotations(harness.FormatBase(t, types.OCIManifestSchema1, types.OCIConfigJSON, types.OCILayer, "amd64"), nil).(v1.Image)
	wrongPlatform := harness.FormatBase(t, types.OCIManifestSchema1, types.OCIConfigJSON, types.OCILayer, "arm64")
	for _, tc := range []struct {
		name string
		idx  v1.ImageIndex
		want string
	}{
		{"a Docker manifest in an OCI index", harness.OneImage(types.OCIImageIndex, mixed, "amd64"), "not an OCI image manifest"},
		{"a Docker manifest list", harness.OneImage(types.DockerManifestList, annotated, "amd64"), "not an OCI image index"},
		{"a platform the config does not say", harness.OneImage(types.OCIImageIndex, wrongPlatform, "amd64"), "its config says linux/arm64, the index linux/amd64"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := CheckOCI(tc.idx); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want %q", err, tc.want)
			}
		})
	}
}

// A dependencies image read back keeps its annotations (where its base was read), so that the
// images built over it are those a build from nothing makes.
func TestDependenciesKeepTheirAnnotations(t *testing.T) {
	deps := mutate.Annotations(harness.FormatBase(t, types.OCIManifestSchema1, types.OCIConfigJSON, types.OCILayer, "amd64"),
		map[string]string{AnnotationBaseName: "node:20"}).(v1.Image)
	again, err := asOCI(deps, "the dependencies image")
	if err != nil {
		t.Fatal(err)
	}
	if digest(t, again) != digest(t, deps) {
		t.Errorf("an OCI dependencies image read back: %s, written %s", digest(t, again), digest(t, deps))
	}
}

// A Docker schema 1 base (what registries served before 2017, and some old mirrors still hold)
// is refused when it is resolved, in words that say what to do, not go-containerregistry's.
func TestSchema1BaseIsRefused(t *testing.T) {
	addr := harness.MemoryRegistry(t)
	manifest := `{"schemaVersion":1,"name":"bases/old","tag":"1","architecture":"amd64","fsLayers":[],"history":[]}`
	req, err := http.NewRequest(http.MethodPut, "http://"+addr+"/v2/bases/old/manifests/1", strings.NewReader(manifest))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", string(types.DockerManifestSchema1Signed))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("PUT the schema 1 manifest: %s", resp.Status)
	}
	err = resolveErr(t, addr+"/bases/old:1")
	for _, want := range []string{"is a Docker schema 1 image", "skopeo copy --format v2s2"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("the error lacks %q: %v", want, err)
		}
	}
}

// A base whose index lists indexes (one per platform, as some tools assemble per-platform builds)
// is built on like a flat one: the same platforms, and the same image digests, on a real registry.
func TestNestedIndexBase(t *testing.T) {
	addr := harness.Registry(t)
	flat := addr + "/bases/node:flat"
	harness.PushRandomBase(t, flat)
	reg, err := registry.NewRegistries()
	if err != nil {
		t.Fatal(err)
	}
	flatRef, _ := reg.Reference(flat)
	idx, err := remote.Index(flatRef)
	if err != nil {
		t.Fatal(err)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	nested := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, d := range m.Manifests {
		img, err := idx.Image(d.Digest)
		if err != nil {
			t.Fatal(err)
		}
		child := mutate.AppendManifests(mutate.IndexMediaType(empty.Index, types.OCIImageIndex),
			mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: d.Platform}})
		nested = mutate.AppendManifests(nested, mutate.IndexAddendum{Add: child})
	}
	nestedRef, _ := reg.Reference(addr + "/bases/node:nested")
	if err := remote.WriteIndex(nestedRef, nested); err != nil {
		t.Fatal(err)
	}

	ctx := context.Background()
	a, b := ResolveBase(ctx, reg, flat), ResolveBase(ctx, reg, nestedRef.String())
	if a.Err != nil || b.Err != nil {
		t.Fatalf("resolve: %v, %v", a.Err, b.Err)
	}
	if len(b.Platforms) != 2 || b.Platforms["linux/amd64"] != a.Platforms["linux/amd64"] || b.Platforms["linux/arm64"] != a.Platforms["linux/arm64"] {
		t.Fatalf("nested %v, flat %v", b.Platforms, a.Platforms)
	}
	onFlat, err := pushWith(ctx, t, harness.TwoCompositions(t, addr, flat), flat, reg)
	if err != nil {
		t.Fatal(err)
	}
	other := harness.Registry(t) // built anew there, not found where the flat push left it
	onNested, err := pushWith(ctx, t, harness.TwoCompositions(t, other, nestedRef.String()), nestedRef.String(), reg)
	if err != nil {
		t.Fatalf("push on the nested base: %v", err)
	}
	for i := range onFlat.Images {
		if !onNested.Images[i].Built {
			t.Errorf("%s: not built on the nested base", onNested.Images[i].Name)
		}
		if strings.TrimPrefix(onNested.Images[i].Digest, other) != strings.TrimPrefix(onFlat.Images[i].Digest, addr) {
			t.Errorf("%s: %s on the nested base, %s on the flat one", onFlat.Images[i].Name, onNested.Images[i].Digest, onFlat.Images[i].Digest)
		}
	}
}
