package sandbox_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/toa-deploy/toa-deploy/internal/fsys"
	"github.com/toa-deploy/toa-deploy/internal/harness"
	"github.com/toa-deploy/toa-deploy/layer/sandbox"
)

// gzipLayer is a gzip layer of these files (name → content).
func gzipLayer(t *testing.T, files map[string]string) v1.Layer {
	t.Helper()
	var raw bytes.Buffer
	zw := gzip.NewWriter(&raw)
	tw := tar.NewWriter(zw)
	for _, n := range []string{"etc/os-release", "usr/bin/tool", "etc/hostile"} { // in one order
		if data, ok := files[n]; ok {
			tw.WriteHeader(&tar.Header{Name: n, Typeflag: tar.TypeReg, Mode: 0o755, Size: int64(len(data))})
			tw.Write([]byte(data))
		}
	}
	tw.Close()
	zw.Close()
	data := raw.Bytes()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil })
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// pushed writes img to ref in the registry and reads it back as a build reads a base.
func pushed(t *testing.T, ref string, img v1.Image) v1.Image {
	t.Helper()
	r, err := name.ParseReference(ref)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(r, img, remote.WithContext(t.Context())); err != nil {
		t.Fatal(err)
	}
	back, err := remote.Image(r, remote.WithContext(t.Context()))
	if err != nil {
		t.Fatal(err)
	}
	return back
}

// TestPoisonedBaseFromARegistry: a registry (Distribution) holds a genuine base and one forged
// to pass for it: the genuine base's config blob over other layers. Unpacked from the registry
// into one cache, the forged base first, it is refused, naming its layer, and the genuine base
// unpacks after it without any of the forged one's files.
func TestPoisonedBaseFromARegistry(t *testing.T) {
	addr := harness.Registry(t)
	lower := gzipLayer(t, map[string]string{"etc/os-release": "genuine"})
	genuineImg, err := mutate.AppendLayers(empty.Image, lower, gzipLayer(t, map[string]string{"usr/bin/tool": "genuine"}))
	if err != nil {
		t.Fatal(err)
	}
	hostileImg, err := mutate.AppendLayers(empty.Image, lower, gzipLayer(t, map[string]string{"usr/bin/tool": "hostile", "etc/hostile": "hostile"}))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := genuineImg.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if hostileImg, err = mutate.ConfigFile(hostileImg, cfg); err != nil {
		t.Fatal(err)
	}
	genuine := pushed(t, addr+"/bases/genuine:1", genuineImg)
	hostile := pushed(t, addr+"/bases/hostile:1", hostileImg)
	g, _ := genuine.ConfigName()
	if h, _ := hostile.ConfigName(); g != h {
		t.Fatalf("the forged base's config %s is not the genuine one's %s", h, g)
	}

	cache := t.TempDir()
	holds := fsys.NewHolds()
	defer holds.Release()
	_, err = sandbox.UnpackHeld(t.Context(), hostile, cache, holds)
	if err == nil || !strings.Contains(err.Error(), "the layer 2 of 2") || !strings.Contains(err.Error(), "rootfs.diff_ids") {
		t.Fatalf("the forged base: %v; want its layer 2 of 2 refused", err)
	}
	if left, _ := os.ReadDir(filepath.Join(cache, "roots")); len(left) != 0 {
		t.Errorf("the refused base left %v", left)
	}
	root, err := sandbox.UnpackHeld(t.Context(), genuine, cache, holds)
	if err != nil {
		t.Fatal(err)
	}
	if data, err := os.ReadFile(filepath.Join(root, "usr", "bin", "tool")); err != nil || string(data) != "genuine" {
		t.Errorf("usr/bin/tool = %q, %v; want the genuine base's", data, err)
	}
	if _, err := os.Lstat(filepath.Join(root, "etc", "hostile")); err == nil {
		t.Error("the genuine base's root holds the forged base's etc/hostile")
	}
}
