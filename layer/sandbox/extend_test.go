package sandbox

import (
	"archive/tar"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"

	"github.com/toa-deploy/toa-deploy/internal/fsys"
)

// tree describes every entry under root: its kind, mode, content or target, and which entries
// share an inode (by the first path of each inode), so that two roots compare whole.
func tree(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	first := map[uint64]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		info, err := d.Info()
		if err != nil {
			return err
		}
		desc := fmt.Sprintf("%s %o", info.Mode().Type(), info.Mode().Perm()|info.Mode()&(fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky))
		switch {
		case info.Mode().IsRegular():
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			ino := info.Sys().(*syscall.Stat_t).Ino
			if f, ok := first[ino]; ok {
				desc += " same as " + f
			} else {
				first[ino] = rel
			}
			desc += " " + string(data)
		case info.Mode()&fs.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			desc += " -> " + target
		}
		out[rel] = desc
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func diffTrees(a, b map[string]string) []string {
	var out []string
	for k, v := range a {
		if b[k] != v {
			out = append(out, fmt.Sprintf("%s: %q, %q", k, v, b[k]))
		}
	}
	for k, v := range b {
		if _, ok := a[k]; !ok {
			out = append(out, fmt.Sprintf("%s: absent, %q", k, v))
		}
	}
	slices.Sort(out)
	return out
}

// TestUnpackOverACachedRoot: a base with a layer over it is made from the cached root of the
// base, its files hard links to the base's, with the layer applied over them; the result is the
// root a whole unpack makes, of the same size, and the base's root is as it was: the layer
// replaced files (their content or their mode), linked to them, turned them into links or
// folders, removed them (whiteouts, an opaque folder), changed folders' modes and wrote into a
// read-only folder, never through a file the two roots share.
func TestUnpackOverACachedRoot(t *testing.T) {
	base, err := mutate.AppendLayers(empty.Image,
		layerOf(t, "gzip",
			entry{name: "etc/", kind: tar.TypeDir},
			entry{name: "etc/content", data: "base", kind: tar.TypeReg},
			entry{name: "etc/mode", data: "base", kind: tar.TypeReg},
			entry{name: "etc/to-link", data: "base", kind: tar.TypeReg},
			entry{name: "etc/to-dir", data: "base", kind: tar.TypeReg},
			entry{name: "etc/gone", data: "base", kind: tar.TypeReg},
			entry{name: "etc/kept", data: "kept", kind: tar.TypeReg},
			entry{name: "etc/kept-link", link: "etc/kept", kind: tar.TypeLink},
			entry{name: "etc/rel", link: "kept", kind: tar.TypeSymlink},
			entry{name: "opq/", kind: tar.TypeDir},
			entry{name: "opq/old", data: "base", kind: tar.TypeReg},
			entry{name: "dir/", kind: tar.TypeDir, mode: 0o750},
			entry{name: "dir/inside", data: "base", kind: tar.TypeReg},
			entry{name: "gone-dir/", kind: tar.TypeDir},
			entry{name: "gone-dir/inside", data: "base", kind: tar.TypeReg},
			entry{name: "to-file/", kind: tar.TypeDir},
			entry{name: "to-file/inside", data: "base", kind: tar.TypeReg},
			entry{name: "usr/bin/tool", data: "base tool", kind: tar.TypeReg, mode: 0o755}),
		layerOf(t, "zstd", entry{name: "ro/", kind: tar.TypeDir, mode: 0o555}, entry{name: "ro/file", data: "base", kind: tar.TypeReg}))
	if err != nil {
		t.Fatal(err)
	}
	over := layerOf(t, "gzip",
		entry{name: "etc/content", data: "layer", kind: tar.TypeReg},
		entry{name: "etc/mode", data: "base", kind: tar.TypeReg, mode: 0o600},
		entry{name: "etc/to-link", link: "/etc/kept", kind: tar.TypeSymlink},
		entry{name: "etc/to-dir/", kind: tar.TypeDir},
		entry{name: "etc/to-dir/file", data: "layer", kind: tar.TypeReg},
		entry{name: "etc/.wh.gone", kind: tar.TypeReg},
		entry{name: "etc/hard-to-base", link: "usr/bin/tool", kind: tar.TypeLink},
		entry{name: "etc/new", data: "layer", kind: tar.TypeReg},
		entry{name: "etc/hard-to-new", link: "etc/new", kind: tar.TypeLink},
		entry{name: "etc/rel/../via-link", data: "layer", kind: tar.TypeReg},
		entry{name: "opq/.wh..wh..opq", kind: tar.TypeReg},
		entry{name: "opq/new", data: "layer", kind: tar.TypeReg},
		entry{name: "dir/", kind: tar.TypeDir, mode: 0o711},
		entry{name: ".wh.gone-dir", kind: tar.TypeReg},
		entry{name: "to-file", data: "layer", kind: tar.TypeReg},
		entry{name: "ro/new", data: "layer", kind: tar.TypeReg})
	img, err := mutate.AppendLayers(base, over)
	if err != nil {
		t.Fatal(err)
	}

	cache := t.TempDir()
	baseRoot, err := Unpack(t.Context(), base, cache)
	if err != nil {
		t.Fatal(err)
	}
	before := tree(t, baseRoot)
	root, err := Unpack(t.Context(), img, cache)
	if err != nil {
		t.Fatal(err)
	}
	if d := diffTrees(before, tree(t, baseRoot)); len(d) > 0 {
		t.Errorf("the base's root changed:\n%s", strings.Join(d, "\n"))
	}
	whole, err := Unpack(t.Context(), img, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if d := diffTrees(tree(t, whole), tree(t, root)); len(d) > 0 {
		t.Errorf("the root made over the base's is not the whole unpack's (whole, over):\n%s", strings.Join(d, "\n"))
	}
	a, _ := os.Stat(filepath.Join(baseRoot, "etc", "kept"))
	b, _ := os.Stat(filepath.Join(root, "etc", "kept"))
	if a == nil || b == nil || !os.SameFile(a, b) {
		t.Error("etc/kept is not the base root's file: the root was unpacked whole, not made from the base's")
	}
	size := func(root string) string {
		data, _ := os.ReadFile(filepath.Join(filepath.Dir(root), fsys.FolderSizeFile))
		return string(data)
	}
	if size(root) != size(whole) || size(root) == "" {
		t.Errorf("the size of the root made over the base's is %q, the whole unpack's %q", size(root), size(whole))
	}
}

// TestUnpackOverACachedRootFallsBack: where the base's root has no size or cannot be copied
// (a device in it), the base with its layer is unpacked whole; a layer over a cached root that
// is not what the config names is refused, nothing kept, the base's root as it was.
func TestUnpackOverACachedRootFallsBack(t *testing.T) {
	base, err := mutate.AppendLayers(empty.Image, layerOf(t, "gzip", entry{name: "etc/a", data: "base", kind: tar.TypeReg}))
	if err != nil {
		t.Fatal(err)
	}
	over := layerOf(t, "gzip", entry{name: "etc/b", data: "layer", kind: tar.TypeReg})
	img, err := mutate.AppendLayers(base, over)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		spoil func(entry string) error
	}{
		{"no size", func(entry string) error { return os.Remove(filepath.Join(entry, fsys.FolderSizeFile)) }},
		{"a fifo", func(entry string) error { return syscall.Mkfifo(filepath.Join(entry, "root", "fifo"), 0o644) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			cache := t.TempDir()
			baseRoot, err := Unpack(t.Context(), base, cache)
			if err != nil {
				t.Fatal(err)
			}
			if err := c.spoil(filepath.Dir(baseRoot)); err != nil {
				t.Fatal(err)
			}
			root, err := Unpack(t.Context(), img, cache)
			if err != nil {
				t.Fatal(err)
			}
			a, _ := os.Stat(filepath.Join(baseRoot, "etc", "a"))
			b, _ := os.Stat(filepath.Join(root, "etc", "a"))
			if a == nil || b == nil || os.SameFile(a, b) {
				t.Errorf("etc/a: %v, %v; want a file of the root's own", a, b)
			}
			if _, err := os.Lstat(filepath.Join(root, "fifo")); err == nil {
				t.Error("the fifo was copied")
			}
		})
	}
	t.Run("forged layer", func(t *testing.T) {
		cache := t.TempDir()
		baseRoot, err := Unpack(t.Context(), base, cache)
		if err != nil {
			t.Fatal(err)
		}
		before := tree(t, baseRoot)
		forged := withConfigOf(t, img, append(must2(base.Layers()), layerOf(t, "gzip", entry{name: "etc/a", data: "forged", kind: tar.TypeReg}))...)
		if _, err := Unpack(t.Context(), forged, cache); err == nil || !strings.Contains(err.Error(), "the layer 2 of 2") {
			t.Fatalf("a forged layer over a cached root: %v", err)
		}
		if d := diffTrees(before, tree(t, baseRoot)); len(d) > 0 {
			t.Errorf("the base's root changed:\n%s", strings.Join(d, "\n"))
		}
		if entries, _ := os.ReadDir(filepath.Join(cache, "roots")); len(entries) != 1 {
			t.Errorf("the refused unpack left %v", entries)
		}
	})
}

func must2[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
