package main

import (
	"os"
	"path/filepath"
	"testing"
)

// TestPruneCacheNeverFollowsLinks: a cache whose layers/deps and bases/roots are links to folders
// outside it holding files, and one of whose kept trees has a node_modules that links outside
// too. `toa-push --prune-cache` with TOA_CACHE_MAX=0 removes the links and the tree, and every
// file outside the cache is still there (before, the prune went through the links and removed
// them).
func TestPruneCacheNeverFollowsLinks(t *testing.T) {
	outside := t.TempDir()
	files := []string{"deps/k.json", "deps/other.json", "roots/sha256-aa/root/etc/passwd", "roots/sha256-aa/.size", "modules/pkg/index.js"}
	for _, f := range files {
		p := filepath.Join(outside, f)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("not the cache's"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cache := t.TempDir()
	links := map[string]string{"layers/deps": "deps", "bases/roots": "roots", "trees/tree-kept/node_modules": "modules"}
	for link, target := range links {
		p := filepath.Join(cache, link)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(filepath.Join(outside, target), p); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(cache, "trees", "tree-kept", "package-lock.json"), []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("TOA_CACHE", cache)
	t.Setenv("TOA_CACHE_MAX", "0")
	code, stdout, stderr := run(t, cache, "--prune-cache")
	if code != 0 {
		t.Fatalf("exit %d:\n%s%s", code, stdout, stderr)
	}
	t.Logf("%s", stdout)
	for _, f := range files {
		if _, err := os.Stat(filepath.Join(outside, f)); err != nil {
			t.Errorf("%s, outside the cache, was removed by the prune: %v", f, err)
		}
	}
	for _, gone := range []string{"layers/deps", "bases/roots", "trees/tree-kept"} {
		if _, err := os.Lstat(filepath.Join(cache, gone)); !os.IsNotExist(err) {
			t.Errorf("%s is still in the cache: %v", gone, err)
		}
	}
}
