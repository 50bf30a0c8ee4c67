package sandbox

import (
	"archive/tar"
	"bytes"
	"io"
	"os"
	"path/filepath"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
)

type entry struct {
	name, data, link string
	kind             byte
}

// layerOf is a layer of these entries, compressed as named ("gzip", "zstd", "" for none).
func layerOf(t *testing.T, compression string, entries ...entry) v1.Layer {
	t.Helper()
	var raw bytes.Buffer
	tw := tar.NewWriter(&raw)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Typeflag: e.kind, Mode: 0o644, Linkname: e.link, Size: int64(len(e.data))}
		if e.kind == tar.TypeDir {
			h.Mode = 0o755
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(e.data)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	switch compression {
	case "gzip":
		zw := gzip.NewWriter(&out)
		zw.Write(raw.Bytes())
		zw.Close()
	case "zstd":
		zw, _ := zstd.NewWriter(&out)
		zw.Write(raw.Bytes())
		zw.Close()
	default:
		out = raw
	}
	data := out.Bytes()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil })
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// TestUnpackLayers: the layers flattened as a runtime would, from gzip, zstd and plain layers:
// an upper file replaces a lower one, a whiteout removes one, an opaque folder hides the lower
// layers' entries in it, a file hides a lower folder, hard and symbolic links are made.
func TestUnpackLayers(t *testing.T) {
	lower := layerOf(t, "gzip",
		entry{name: "etc/", kind: tar.TypeDir},
		entry{name: "etc/a", data: "lower", kind: tar.TypeReg},
		entry{name: "etc/gone", data: "x", kind: tar.TypeReg},
		entry{name: "opq/", kind: tar.TypeDir},
		entry{name: "opq/old", data: "x", kind: tar.TypeReg},
		entry{name: "dir/", kind: tar.TypeDir},
		entry{name: "dir/inside", data: "x", kind: tar.TypeReg},
		entry{name: "./keep", data: "kept", kind: tar.TypeReg},
		entry{name: "keep-link", link: "keep", kind: tar.TypeLink},
		entry{name: "lnk", link: "/etc/a", kind: tar.TypeSymlink})
	middle := layerOf(t, "", entry{name: "dir", data: "now a file", kind: tar.TypeReg})
	upper := layerOf(t, "zstd",
		entry{name: "etc/a", data: "upper", kind: tar.TypeReg},
		entry{name: "etc/.wh.gone", kind: tar.TypeReg},
		entry{name: "opq/.wh..wh..opq", kind: tar.TypeReg},
		entry{name: "opq/new", data: "new", kind: tar.TypeReg})
	img, err := mutate.AppendLayers(empty.Image, lower, middle, upper)
	if err != nil {
		t.Fatal(err)
	}
	root, err := Unpack(t.Context(), img, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for file, want := range map[string]string{"etc/a": "upper", "opq/new": "new", "keep": "kept", "keep-link": "kept", "dir": "now a file"} {
		if got, err := os.ReadFile(filepath.Join(root, file)); err != nil || string(got) != want {
			t.Errorf("%s = %q, %v; want %q", file, got, err, want)
		}
	}
	for _, gone := range []string{"etc/gone", "opq/old", "dir/inside"} {
		if _, err := os.Lstat(filepath.Join(root, gone)); err == nil {
			t.Errorf("%s is there: an upper layer removed it", gone)
		}
	}
	if link, err := os.Readlink(filepath.Join(root, "lnk")); err != nil || link != "/etc/a" {
		t.Errorf("lnk -> %q, %v", link, err)
	}
	a, _ := os.Stat(filepath.Join(root, "keep"))
	b, _ := os.Stat(filepath.Join(root, "keep-link"))
	if a == nil || b == nil || !os.SameFile(a, b) {
		t.Error("keep-link is not a hard link of keep")
	}
}
