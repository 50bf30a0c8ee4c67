package sandbox

import (
	"archive/tar"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
)

// withConfigOf is an image of layers under the config of genuine (its rootfs.diff_ids among
// it), as a registry serves a base forged to pass for genuine: the same config blob, other
// layers in the manifest.
func withConfigOf(t *testing.T, genuine v1.Image, layers ...v1.Layer) v1.Image {
	t.Helper()
	img, err := mutate.AppendLayers(empty.Image, layers...)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := genuine.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if img, err = mutate.ConfigFile(img, cfg); err != nil {
		t.Fatal(err)
	}
	want, _ := genuine.ConfigName()
	if got, err := img.ConfigName(); err != nil || got != want {
		t.Fatalf("the forged base's config is %s, %v; want the genuine's %s", got, err, want)
	}
	return img
}

// TestUnpackRefusesLayersNotOfItsConfig: a base whose layers are not those its config names
// (rootfs.diff_ids), in their bytes or their number, is refused while it is unpacked, whatever
// its compression, with the layer, what the config says and what it holds; nothing is kept.
func TestUnpackRefusesLayersNotOfItsConfig(t *testing.T) {
	for _, compression := range []string{"gzip", "zstd", ""} {
		lower := layerOf(t, compression, entry{name: "etc/os-release", data: "genuine", kind: tar.TypeReg})
		upper := layerOf(t, compression, entry{name: "usr/bin/tool", data: "genuine", kind: tar.TypeReg})
		hostile := layerOf(t, compression, entry{name: "usr/bin/tool", data: "hostile", kind: tar.TypeReg})
		genuine, err := mutate.AppendLayers(empty.Image, lower, upper)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := upper.DiffID()
		got, _ := hostile.DiffID()
		cases := []struct {
			name   string
			layers []v1.Layer
			words  []string
		}{
			{"another layer", []v1.Layer{lower, hostile}, []string{"the layer 2 of 2 (sha256:", "is " + got.String() + " uncompressed, where the base's config says " + want.String() + " (rootfs.diff_ids)"}},
			{"a layer more", []v1.Layer{lower, upper, hostile}, []string{"its manifest lists 3 layers where its config names 2 (rootfs.diff_ids)"}},
			{"a layer less", []v1.Layer{lower}, []string{"its manifest lists 1 layers where its config names 2 (rootfs.diff_ids)"}},
		}
		for _, c := range cases {
			t.Run(c.name+" "+compression, func(t *testing.T) {
				img := withConfigOf(t, genuine, c.layers...)
				cache := t.TempDir()
				_, err := Unpack(t.Context(), img, cache)
				if err == nil {
					t.Fatal("unpacked")
				}
				for _, w := range append(c.words, "unpack the base", "forged to pass for another base", "push this one again from its source") {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("the error does not say %q: %v", w, err)
					}
				}
				if entries, _ := os.ReadDir(filepath.Join(cache, "roots")); len(entries) != 0 {
					t.Errorf("the refused unpack left %v", entries)
				}
			})
		}
	}
}

// TestEachLayer: the layers are read the lowest first, each to its end after the function; a
// layer not of the config fails the reading even when the function stopped at its first entry
// (ErrSkipRest), and ErrSkipRest ends it without reading the layers above.
func TestEachLayer(t *testing.T) {
	lower := layerOf(t, "gzip", entry{name: "lib/ld-musl-x86_64.so.1", data: "loader", kind: tar.TypeReg}, entry{name: "lib/z", data: "z", kind: tar.TypeReg})
	upper := layerOf(t, "zstd", entry{name: "etc/a", data: "a", kind: tar.TypeReg})
	genuine, err := mutate.AppendLayers(empty.Image, lower, upper)
	if err != nil {
		t.Fatal(err)
	}
	firstOf := func(seen *[]string, skip bool) func(int, *tar.Reader) error {
		return func(_ int, tr *tar.Reader) error {
			h, err := tr.Next()
			if err != nil {
				return err
			}
			*seen = append(*seen, h.Name)
			if skip {
				return ErrSkipRest
			}
			_, err = io.Copy(io.Discard, tr)
			return err
		}
	}
	var seen []string
	if err := EachLayer(t.Context(), genuine, firstOf(&seen, false)); err != nil || strings.Join(seen, " ") != "lib/ld-musl-x86_64.so.1 etc/a" {
		t.Errorf("EachLayer = %v, saw %v", err, seen)
	}
	seen = nil
	if err := EachLayer(t.Context(), genuine, firstOf(&seen, true)); err != nil || strings.Join(seen, " ") != "lib/ld-musl-x86_64.so.1" {
		t.Errorf("EachLayer with ErrSkipRest = %v, saw %v", err, seen)
	}
	forged := withConfigOf(t, genuine, layerOf(t, "gzip", entry{name: "lib/ld-musl-x86_64.so.1", data: "other", kind: tar.TypeReg}), upper)
	seen = nil
	err = EachLayer(t.Context(), forged, firstOf(&seen, true))
	var mismatch *LayerMismatch
	if !errors.As(err, &mismatch) || !strings.Contains(mismatch.Layer, "the layer 1 of 2") {
		t.Errorf("EachLayer of a forged base = %v, want the layer 1 of 2 refused", err)
	}
}
