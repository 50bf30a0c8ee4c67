package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/toa-deploy/toa-deploy/internal/harness"
)

// TestZstdLayers pushes with --compression zstd: every layer toa-push makes is tar+zstd, skopeo
// reads the images, umoci unpacks them (through skopeo, which recompresses for Debian's umoci)
// with the files in place, and a second push from another cache and folder gives the same
// digests.
func TestZstdLayers(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: needs a registry, npm, skopeo and umoci")
	}
	addr := harness.Registry(t)
	base := harness.PushBase(t, addr, harness.OCIIndex)
	dir := copyApp(t, "pushed", addr)
	onBase(t, dir, base, []string{"linux/amd64"})
	run := pushed(t, dir, t.TempDir(), "--compression", "zstd", "--sbom", "none")
	front := run.out.Images[0]
	types := run.reads[front.Name].Image(t, "linux/amd64").LayerTypes
	if !slices.Contains(types, "application/vnd.oci.image.layer.v1.tar+zstd") {
		t.Errorf("the layers of %s are %v: none is tar+zstd", front.Name, types)
	}
	rootfs, _ := harness.Unpacked(t, front.Reference, "linux/amd64")
	for _, f := range []string{"composition/shop-orders/operations.js", "composition/shop-orders/node_modules/is-number/index.js"} {
		if _, err := os.Stat(filepath.Join(rootfs, f)); err != nil {
			t.Errorf("umoci unpacked no %s: %v", f, err)
		}
	}

	other := harness.Registry(t)
	again := copyApp(t, "pushed", other)
	onBase(t, again, harness.PushBase(t, other, harness.OCIIndex), []string{"linux/amd64"})
	second := push(t, again, t.TempDir(), "--compression", "zstd", "--sbom", "none")
	for i, img := range second.Images {
		if img.Digest != run.out.Images[i].Digest {
			t.Errorf("%s: %s from another cache and folder, %s before", img.Name, img.Digest, run.out.Images[i].Digest)
		}
	}
}

// TestZstdHasTagsOfItsOwn: a gzip push and a zstd push of the same application, from one cache
// to one registry, are other images under other tags, the dependencies images too: the zstd
// push does not take the gzip dependencies image for its own. go-containerregistry reads both,
// each with its layers' media type, and their files.
func TestZstdHasTagsOfItsOwn(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: needs a registry, npm and skopeo")
	}
	addr := harness.Registry(t)
	base := harness.PushBase(t, addr, harness.OCIIndex)
	dir := copyApp(t, "pushed", addr)
	onBase(t, dir, base, []string{"linux/amd64"})
	cache := t.TempDir()
	gzipped := push(t, dir, cache, "--sbom", "none")
	zstd := push(t, dir, cache, "--compression", "zstd", "--sbom", "none")
	for i, img := range zstd.Images {
		before := gzipped.Images[i]
		if img.Tag == before.Tag || img.Digest == before.Digest || !img.Built || !img.DepsBuilt {
			t.Errorf("%s: zstd %s (%s, built %v, dependencies built %v), gzip %s (%s): want another image under another tag",
				img.Name, img.Tag, img.Digest, img.Built, img.DepsBuilt, before.Tag, before.Digest)
		}
	}
	front := zstd.Images[0]
	ref, err := name.ParseReference(front.Reference, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	repo := ref.Context()
	tags, err := remote.List(repo)
	if err != nil {
		t.Fatal(err)
	}
	var deps []string
	for _, tag := range tags {
		if strings.HasPrefix(tag, "deps-") {
			deps = append(deps, tag)
		}
	}
	if len(deps) != 2 {
		t.Errorf("%s has the dependencies tags %v, want two: gzip's and zstd's", repo, deps)
	}
	for _, c := range []struct {
		ref  string
		want types.MediaType
	}{{gzipped.Images[0].Reference, types.OCILayer}, {front.Reference, types.OCILayerZStd}} {
		idx, m := index(t, c.ref)
		img, err := idx.Image(m.Manifests[0].Digest)
		if err != nil {
			t.Fatal(err)
		}
		layers, err := img.Layers()
		if err != nil {
			t.Fatal(err)
		}
		top := layers[len(layers)-1] // the sources, which toa-push made
		if mt, err := top.MediaType(); err != nil || mt != c.want {
			t.Errorf("%s: the sources layer is %s (%v), want %s", c.ref, mt, err, c.want)
		}
		if got := files(t, img); !got["composition/shop-orders/operations.js"] || !got["composition/shop-orders/node_modules/is-number/index.js"] {
			t.Errorf("%s: go-containerregistry read no sources or dependencies from its layers", c.ref)
		}
	}
}
