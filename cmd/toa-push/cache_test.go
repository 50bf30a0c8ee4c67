package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
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

// TestPruneLeavesABaseInUse: two runs share a cache; one prunes it to nothing (TOA_CACHE_MAX=0)
// while the other builds inside the bases it unpacked there. The prune leaves those bases, and the
// build finishes; once it has ended, the next prune removes them.
func TestPruneLeavesABaseInUse(t *testing.T) {
	addr := harness.Registry(t)
	harness.PushDebianBase(t, addr)
	dir := copyApp(t, "native", addr)
	cache := t.TempDir()
	t.Setenv("TOA_CACHE", cache)
	push := exec.Command(binary, "-o", "json", "--path", dir, "-k", filepath.Join(dir, "deployment"))
	push.Env = append(os.Environ(), "TOA_ENV=", "CI=true")
	var pushErr bytes.Buffer
	push.Stderr = &pushErr
	if err := push.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- push.Wait() }()
	roots := func() []string {
		found, _ := filepath.Glob(filepath.Join(cache, "bases", "roots", "sha256-*", "root"))
		return found
	}
	deadline := time.Now().Add(2 * time.Minute)
	for len(roots()) < 2 {
		select {
		case err := <-done:
			t.Fatalf("the push ended (%v) before both bases were unpacked:\n%s", err, pushErr.String())
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("the bases were not unpacked in 2 minutes:\n%s", pushErr.String())
		}
	}
	inUse := roots()
	t.Setenv("TOA_CACHE_MAX", "0")
	code, stdout, stderr := run(t, cache, "--prune-cache", "-o", "json")
	if code != 0 {
		t.Fatalf("the prune exited %d:\n%s", code, stderr)
	}
	for _, root := range inUse {
		if !exists(root) {
			t.Errorf("the prune removed %s, which the push was using:\n%s", root, stdout)
		}
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("the push failed beside the prune: %v\n%s", err, pushErr.String())
		}
	case <-time.After(5 * time.Minute):
		push.Process.Kill()
		t.Fatalf("the push did not end in 5 minutes:\n%s", pushErr.String())
	}
	if code, _, stderr := run(t, cache, "--prune-cache"); code != 0 {
		t.Fatalf("the second prune exited %d:\n%s", code, stderr)
	}
	if left := roots(); len(left) != 0 {
		t.Errorf("the prune after the push left %v", left)
	}
}
