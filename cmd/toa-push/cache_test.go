package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/toa-deploy/toa-deploy/internal/harness"
)

// oldCache fills a cache folder with entries last used a day ago and more, and a file of the
// harness's that no prune may touch; it returns the folder and the paths of the entries.
func oldCache(t *testing.T) (string, []string) {
	t.Helper()
	root := t.TempDir()
	var entries []string
	for i, path := range []string{"layers/sha256/" + strings.Repeat("a", 64) + ".tar.gz", "layers/deps/k.json",
		"bases/" + strings.Repeat("b", 64) + ".json", "npm/_cacache/content-v2/x", "tools/oras"} {
		full := filepath.Join(root, path)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, make([]byte, 4096), 0o644); err != nil {
			t.Fatal(err)
		}
		at := time.Now().Add(-time.Duration(48-i) * time.Hour)
		if err := os.Chtimes(full, at, at); err != nil {
			t.Fatal(err)
		}
		entries = append(entries, full)
	}
	return root, entries
}

func exists(path string) bool { _, err := os.Stat(path); return err == nil }

// TestPruneCache: --prune-cache prunes to TOA_CACHE_MAX now, least recently used first, and says
// what went in -o json; a TOA_CACHE_MAX that is not a size is bad input before any work.
func TestPruneCache(t *testing.T) {
	root, entries := oldCache(t)
	t.Setenv("TOA_CACHE", root)
	t.Setenv("TOA_CACHE_MAX", "9KiB")
	code, stdout, stderr := run(t, root, "--prune-cache", "-o", "json")
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, stderr)
	}
	var report struct {
		Root    string `json:"root"`
		Max     int64  `json:"max"`
		Before  int64  `json:"before"`
		After   int64  `json:"after"`
		Removed []struct {
			Path string `json:"path"`
			Size int64  `json:"size"`
		} `json:"removed"`
	}
	if err := json.Unmarshal([]byte(stdout), &report); err != nil {
		t.Fatalf("%v\n%s", err, stdout)
	}
	if report.Max != 9<<10 || report.Before != 4*4096 || report.After != 2*4096 || len(report.Removed) != 2 ||
		report.Removed[0].Path != entries[0] || report.Removed[1].Path != entries[1] {
		t.Errorf("report: %s", stdout)
	}
	for i, want := range []bool{false, false, true, true, true} {
		if exists(entries[i]) != want {
			t.Errorf("%s: kept %v, want %v", entries[i], !want, want)
		}
	}

	t.Setenv("TOA_CACHE_MAX", "lots")
	code, _, stderr = run(t, root, "--prune-cache")
	if code != 2 || !strings.Contains(stderr, `TOA_CACHE_MAX: is "lots": not a size`) {
		t.Errorf("exit %d, want 2 naming TOA_CACHE_MAX:\n%s", code, stderr)
	}
}

// TestRunPrunesTheCache: a run ends by pruning the caches to TOA_CACHE_MAX, and keeps what it
// used itself (the base's digests it resolved now) even past the bound.
func TestRunPrunesTheCache(t *testing.T) {
	registry := harness.MemoryRegistry(t)
	harness.PushRandomBase(t, registry+"/bases/node:test")
	dir := copyApp(t, "pushed", registry)
	root, entries := oldCache(t)
	t.Setenv("TOA_CACHE", root)
	t.Setenv("TOA_CACHE_MAX", "0")
	code, _, stderr := run(t, dir, "--plan", "--path", dir, "-k", filepath.Join(dir, "deployment"))
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, stderr)
	}
	for i, want := range []bool{false, false, false, false, true} {
		if exists(entries[i]) != want {
			t.Errorf("%s: kept %v, want %v", entries[i], !want, want)
		}
	}
	resolved, _ := filepath.Glob(filepath.Join(root, "bases", "*.json"))
	if len(resolved) != 1 {
		t.Errorf("the base the run resolved is not kept: %v", resolved)
	}
}
