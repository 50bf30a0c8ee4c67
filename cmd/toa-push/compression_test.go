package main

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

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
