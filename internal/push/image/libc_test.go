package image

import (
	"archive/tar"
	"bytes"
	"io"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// libcTestLayer is an uncompressed layer of empty files with these names.
func libcTestLayer(t *testing.T, names ...string) v1.Layer {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, n := range names {
		if err := tw.WriteHeader(&tar.Header{Name: n, Typeflag: tar.TypeReg, Mode: 0o755}); err != nil {
			t.Fatal(err)
		}
	}
	tw.Close()
	data := b.Bytes()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil })
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// TestFindLibcChecksTheConfig: the libc is looked for in layers checked against the diff IDs
// of the base's config: a base forged to pass for a glibc one (its config, another layer holding
// musl's loader) is refused, not said to be musl (which the cache would then keep for its digest).
func TestFindLibcChecksTheConfig(t *testing.T) {
	genuine, err := mutate.AppendLayers(empty.Image, libcTestLayer(t, "lib64/ld-linux-x86-64.so.2"), libcTestLayer(t, "usr/bin/node"))
	if err != nil {
		t.Fatal(err)
	}
	if libc, err := findLibc(t.Context(), genuine); err != nil || libc != "glibc" {
		t.Fatalf("findLibc of the genuine base = %q, %v", libc, err)
	}
	forged, err := mutate.AppendLayers(empty.Image, libcTestLayer(t, "lib/ld-musl-x86_64.so.1"), libcTestLayer(t, "usr/bin/node"))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := genuine.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if forged, err = mutate.ConfigFile(forged, cfg); err != nil {
		t.Fatal(err)
	}
	libc, err := findLibc(t.Context(), forged)
	if err == nil || !strings.Contains(err.Error(), "the layer 1 of 2") || !strings.Contains(err.Error(), "rootfs.diff_ids") {
		t.Errorf("findLibc of a forged base = %q, %v; want the layer 1 of 2 refused", libc, err)
	}
}
