package sandbox

import (
	"archive/tar"
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"

	"github.com/toa-deploy/toa-deploy/internal/fsys"
)

type entry struct {
	name, data, link string
	kind             byte
	mode             int64 // 0: 0644 for a file, 0755 for a folder
}

// layerOf is a layer of these entries, compressed as named ("gzip", "zstd", "" for none).
func layerOf(t testing.TB, compression string, entries ...entry) v1.Layer {
	t.Helper()
	var raw bytes.Buffer
	tw := tar.NewWriter(&raw)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Typeflag: e.kind, Mode: 0o644, Linkname: e.link, Size: int64(len(e.data))}
		if e.kind == tar.TypeDir {
			h.Mode = 0o755
		}
		if e.mode != 0 {
			h.Mode = e.mode
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

// TestUnpackLayersInOrder: the layers are applied the lowest first, each over what the ones
// below made, as a runtime applies them: an opaque marker hides the lower layers' entries of its
// folder, not those its own layer wrote before or after it, at any depth; a link replaces a
// folder and a folder a link (never written through it); a whiteout removes a folder, read-only in its layer,
// with what is in it, and of something absent is nothing; a hard link reaches a lower layer's file.
func TestUnpackLayersInOrder(t *testing.T) {
	lower := layerOf(t, "gzip",
		entry{name: "opq/", kind: tar.TypeDir},
		entry{name: "opq/old", data: "x", kind: tar.TypeReg},
		entry{name: "opq/sub/", kind: tar.TypeDir},
		entry{name: "opq/sub/old", data: "x", kind: tar.TypeReg},
		entry{name: "target/", kind: tar.TypeDir},
		entry{name: "was-link", link: "target", kind: tar.TypeSymlink},
		entry{name: "was-dir/", kind: tar.TypeDir},
		entry{name: "was-dir/inside", data: "x", kind: tar.TypeReg},
		entry{name: "ro/", kind: tar.TypeDir},
		entry{name: "ro/inside", data: "x", kind: tar.TypeReg},
		entry{name: "data", data: "lower data", kind: tar.TypeReg})
	ro := layerOf(t, "", entry{name: "ro/", kind: tar.TypeDir, mode: 0o555})
	upper := layerOf(t, "gzip",
		entry{name: "opq/sub/", kind: tar.TypeDir},
		entry{name: "opq/sub/new", data: "new", kind: tar.TypeReg},
		entry{name: "opq/kept", data: "kept", kind: tar.TypeReg},
		entry{name: "opq/.wh..wh..opq", kind: tar.TypeReg},
		entry{name: "was-link/", kind: tar.TypeDir},
		entry{name: "was-link/file", data: "in the folder", kind: tar.TypeReg},
		entry{name: "was-dir", link: "target", kind: tar.TypeSymlink},
		entry{name: ".wh.ro", kind: tar.TypeReg},
		entry{name: ".wh.never-there", kind: tar.TypeReg},
		entry{name: "nowhere/.wh.x", kind: tar.TypeReg},
		entry{name: "data-link", link: "data", kind: tar.TypeLink})
	img, err := mutate.AppendLayers(empty.Image, lower, ro, upper)
	if err != nil {
		t.Fatal(err)
	}
	root, err := Unpack(t.Context(), img, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for file, want := range map[string]string{"opq/sub/new": "new", "opq/kept": "kept", "was-link/file": "in the folder", "data-link": "lower data"} {
		if got, err := os.ReadFile(filepath.Join(root, file)); err != nil || string(got) != want {
			t.Errorf("%s = %q, %v; want %q", file, got, err, want)
		}
	}
	for _, gone := range []string{"opq/old", "opq/sub/old", "ro", "target/file", "target/inside"} {
		if _, err := os.Lstat(filepath.Join(root, gone)); err == nil {
			t.Errorf("%s is there", gone)
		}
	}
	if info, err := os.Lstat(filepath.Join(root, "was-link")); err != nil || !info.IsDir() {
		t.Errorf("was-link is not a folder: %v, %v", info, err)
	}
	if link, err := os.Readlink(filepath.Join(root, "was-dir")); err != nil || link != "target" {
		t.Errorf("was-dir -> %q, %v; want a link to target", link, err)
	}
}

// TestUnpackCutLayer: a layer whose compressed stream is cut short fails the unpack, whatever
// the decompression was doing ahead of the writes, and leaves no root behind.
func TestUnpackCutLayer(t *testing.T) {
	for _, compression := range []string{"gzip", "zstd"} {
		t.Run(compression, func(t *testing.T) {
			big := strings.Repeat("0123456789abcdef", 1<<18) // 4 MiB: several blocks ahead
			whole := layerOf(t, compression, entry{name: "a", data: big, kind: tar.TypeReg}, entry{name: "b", data: big, kind: tar.TypeReg})
			rc, err := whole.Compressed()
			if err != nil {
				t.Fatal(err)
			}
			data, _ := io.ReadAll(rc)
			img, err := mutate.AppendLayers(empty.Image, cutLayer{Layer: whole, data: data[:len(data)/2]})
			if err != nil {
				t.Fatal(err)
			}
			cache := t.TempDir()
			if _, err := Unpack(t.Context(), img, cache); err == nil {
				t.Fatal("a cut layer was unpacked")
			}
			if entries, _ := os.ReadDir(filepath.Join(cache, "roots")); len(entries) != 0 {
				t.Errorf("the failed unpack left %v", entries)
			}
		})
	}
}

// cutLayer serves the first bytes of a layer, as a registry that closed the stream early.
type cutLayer struct {
	v1.Layer
	data []byte
}

func (l cutLayer) Compressed() (io.ReadCloser, error) {
	return io.NopCloser(bytes.NewReader(l.data)), nil
}

// TestUnpackWhiteoutOfNoEntry: a whiteout whose name is "." or ".." (".wh..", ".wh...") names
// its own folder or its parent, for the root a folder outside it: the unpack is refused, and
// nothing beside the root is removed.
func TestUnpackWhiteoutOfNoEntry(t *testing.T) {
	for _, name := range []string{".wh...", ".wh..", "etc/.wh...", ".wh."} {
		t.Run(name, func(t *testing.T) {
			lower := layerOf(t, "gzip", entry{name: "etc/", kind: tar.TypeDir}, entry{name: "etc/a", data: "a", kind: tar.TypeReg})
			upper := layerOf(t, "gzip", entry{name: name, kind: tar.TypeReg})
			img, err := mutate.AppendLayers(empty.Image, lower, upper)
			if err != nil {
				t.Fatal(err)
			}
			cache := t.TempDir()
			beside := filepath.Join(cache, "roots", "beside")
			if err := os.MkdirAll(beside, 0o755); err != nil {
				t.Fatal(err)
			}
			_, err = Unpack(t.Context(), img, cache)
			if err == nil || !strings.Contains(err.Error(), name+": a whiteout that names no entry of its folder") {
				t.Errorf("Unpack: %v", err)
			}
			if _, err := os.Stat(beside); err != nil {
				t.Errorf("the unpack removed what was beside it: %v", err)
			}
		})
	}
}

// unpackedOnce is a one-file base (etc/a) unpacked into a new cache, and the root it was given.
func unpackedOnce(t *testing.T) (img v1.Image, cache, root string) {
	t.Helper()
	img, err := mutate.AppendLayers(empty.Image, layerOf(t, "gzip", entry{name: "etc/a", data: "12345", kind: tar.TypeReg}))
	if err != nil {
		t.Fatal(err)
	}
	cache = t.TempDir()
	root, err = Unpack(t.Context(), img, cache)
	if err != nil {
		t.Fatal(err)
	}
	return img, cache, root
}

// TestUnpackIsACacheEntry: an unpacked base is an entry of the cache's bound (fsys.BaseRoots):
// a folder that says its size, marked used each time a run takes it; an entry left by an older
// toa-push (the root itself, no size) is made again.
func TestUnpackIsACacheEntry(t *testing.T) {
	img, cache, root := unpackedOnce(t)
	entry := filepath.Dir(root)
	if size, err := os.ReadFile(filepath.Join(entry, fsys.FolderSizeFile)); err != nil || string(size) != "5" {
		t.Errorf("the entry's size: %q, %v; want 5", size, err)
	}
	old := time.Now().Add(-time.Hour)
	if err := os.Chtimes(entry, old, old); err != nil {
		t.Fatal(err)
	}
	if again, err := Unpack(t.Context(), img, cache); err != nil || again != root {
		t.Fatalf("again: %s, %v", again, err)
	}
	if info, err := os.Stat(entry); err != nil || !info.ModTime().After(old.Add(time.Minute)) {
		t.Errorf("the entry was not marked used: %v, %v", info.ModTime(), err)
	}
	// as an older toa-push kept it: the root at the entry's place
	if err := os.RemoveAll(entry); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(entry, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	if again, err := Unpack(t.Context(), img, cache); err != nil || again != root {
		t.Fatalf("over an older entry: %s, %v", again, err)
	}
	if data, err := os.ReadFile(filepath.Join(root, "etc", "a")); err != nil || string(data) != "12345" {
		t.Errorf("etc/a = %q, %v", data, err)
	}
}

// TestUnpackAgainWhenPruned: a root that a prune removes while the run waits to hold it (the
// prune holds the exclusive lock) is unpacked again and held, not an error.
func TestUnpackAgainWhenPruned(t *testing.T) {
	img, cache, root := unpackedOnce(t)
	folder := filepath.Dir(root)
	prune, err := os.Open(folder)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Flock(int(prune.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	holds := fsys.NewHolds()
	defer holds.Release()
	type result struct {
		root string
		err  error
	}
	done := make(chan result)
	go func() {
		root, err := UnpackHeld(t.Context(), img, cache, holds)
		done <- result{root, err}
	}()
	time.Sleep(300 * time.Millisecond) // the run found the root and waits for the prune's lock
	if err := os.RemoveAll(folder); err != nil {
		t.Fatal(err)
	}
	prune.Close()
	got := <-done
	if got.err != nil || got.root != root {
		t.Fatalf("UnpackHeld = %s, %v; want %s unpacked again", got.root, got.err, root)
	}
	if data, err := os.ReadFile(filepath.Join(root, "etc", "a")); err != nil || string(data) != "12345" {
		t.Errorf("etc/a = %q, %v", data, err)
	}
	report, err := fsys.Prune(t.Context(), cache, 0, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(root); err != nil || len(report.Removed) != 0 {
		t.Errorf("the root unpacked again is not held: %v, report %+v", err, report)
	}
}
