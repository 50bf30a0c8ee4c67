package fsys

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// outsideFiles makes a folder outside the cache holding files, and returns a check that they are
// all still there.
func outsideFiles(t *testing.T, names ...string) (string, func()) {
	t.Helper()
	dir := t.TempDir()
	for _, name := range names {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("not the cache's"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir, func() {
		t.Helper()
		for _, name := range names {
			if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
				t.Errorf("%s, outside the cache, was removed: %v", name, err)
			}
		}
	}
}

func symlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

// TestRemoveAll: a folder with links to a folder outside it, at its top and deep inside, and
// folders its owner may not read, write or search (an image's, overlayfs's work folder of mode 0),
// is removed whole; what the links lead to is left.
func TestRemoveAll(t *testing.T) {
	outside, check := outsideFiles(t, "a", "sub/b")
	dir := filepath.Join(t.TempDir(), "work")
	symlink(t, outside, filepath.Join(dir, "link"))
	symlink(t, outside, filepath.Join(dir, "deep", "er", "link"))
	symlink(t, filepath.Join(outside, "a"), filepath.Join(dir, "file-link"))
	if err := os.WriteFile(filepath.Join(dir, "deep", "file"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, locked := range []struct {
		name string
		mode os.FileMode
	}{{"read-only", 0o555}, {"mode-0", 0}} {
		p := filepath.Join(dir, locked.name, "inner")
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(p, "f"), nil, 0o444); err != nil {
			t.Fatal(err)
		}
		os.Chmod(p, locked.mode)
		os.Chmod(filepath.Dir(p), locked.mode)
	}
	if err := RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(dir); !os.IsNotExist(err) {
		t.Errorf("%s is still there: %v", dir, err)
	}
	check()
	if err := RemoveAll(dir); err != nil {
		t.Errorf("a missing folder: %v", err)
	}
	// a link itself is removed as a link
	link := filepath.Join(t.TempDir(), "link")
	symlink(t, outside, link)
	if err := RemoveAll(link); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(link); !os.IsNotExist(err) {
		t.Errorf("the link is still there: %v", err)
	}
	check()
}

// TestPruneNeverFollowsLinks: links where a cache has a folder (layers/deps, bases/roots, npm),
// an entry (a layer, a kept tree) or inside a folder entry (a kept tree's node_modules) lead to
// folders outside the cache holding files. A prune to 0 removes every entry and every link, as
// links, and leaves every file outside; the kept tree, reached through no link, is removed whole,
// its read-only folder too.
func TestPruneNeverFollowsLinks(t *testing.T) {
	root := t.TempDir()
	deps, checkDeps := outsideFiles(t, "k.json", ".partial-1")
	roots, checkRoots := outsideFiles(t, "sha256-aa/root/etc/passwd", "sha256-aa/.size")
	npm, checkNpm := outsideFiles(t, "_cacache/content-v2/x")
	modules, checkModules := outsideFiles(t, "pkg/index.js")
	tree, checkTree := outsideFiles(t, "node_modules/pkg/index.js")
	layer, checkLayer := outsideFiles(t, "layer.tar.gz")
	symlink(t, deps, DepsLayers.Dir(root))
	symlink(t, roots, BaseRoots.Dir(root))
	symlink(t, npm, Npm.Dir(root))
	symlink(t, tree, Trees.Path(root, "tree-link"))
	symlink(t, filepath.Join(layer, "layer.tar.gz"), Layers.Path(root, "aa.tar.gz"))
	kept := Trees.Path(root, "tree-kept")
	symlink(t, modules, filepath.Join(kept, "node_modules"))
	if err := os.MkdirAll(filepath.Join(kept, "ro"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(kept, "ro", "lock.json"), make([]byte, 10), 0o444); err != nil {
		t.Fatal(err)
	}
	os.Chmod(filepath.Join(kept, "ro"), 0o555)
	old := time.Now().Add(-48 * time.Hour)
	os.Chtimes(kept, old, old)

	report, err := Prune(t.Context(), root, 0, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	for _, check := range []func(){checkDeps, checkRoots, checkNpm, checkModules, checkTree, checkLayer} {
		check()
	}
	for _, p := range []string{DepsLayers.Dir(root), BaseRoots.Dir(root), Npm.Dir(root), Trees.Path(root, "tree-link"), Layers.Path(root, "aa.tar.gz"), kept} {
		if _, err := os.Lstat(p); !os.IsNotExist(err) {
			t.Errorf("%s is kept: %v", p, err)
		}
	}
	if len(report.Removed) != 6 || report.Before != 10 || report.After != 0 {
		t.Errorf("report: %+v; want 6 entries, 10 bytes, removed", report)
	}
}
