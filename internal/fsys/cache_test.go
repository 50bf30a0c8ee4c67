package fsys

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/toa-deploy/toa-deploy/internal/fault"
)

// TestREADMETable: README's "What is cached where" lists every cache of the table, in its order,
// with the table's folder, key and bound, and nothing else.
func TestREADMETable(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(data), "### What is cached where\n")
	if !ok {
		t.Fatal(`README.md has no "### What is cached where" section`)
	}
	var rows [][]string
	for _, line := range strings.Split(section, "\n") {
		if strings.HasPrefix(line, "#") {
			break
		}
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), " | ")
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		rows = append(rows, cells)
	}
	var want [][]string
	for _, c := range Caches() {
		want = append(want, []string{"`" + c.shown() + "`", c.Holds(), c.Key(), c.boundText()})
	}
	if !slices.EqualFunc(rows, want, slices.Equal) {
		var b strings.Builder
		for _, r := range want {
			b.WriteString("| " + strings.Join(r, " | ") + " |\n")
		}
		t.Errorf("README.md's table is not fsys's; the rows should be:\n%s\ngot %q", b.String(), rows)
	}
}

// shown is how the README names the cache's entries.
func (c Cache) shown() string {
	switch {
	case c.Pattern() == "":
		return filepath.ToSlash(c.Folder()) + "/"
	case c.Folder() == "":
		return c.Pattern()
	}
	return filepath.ToSlash(c.Folder()) + "/" + c.Pattern()
}

func (c Cache) boundText() string {
	if c.Bound() == 0 {
		return "—"
	}
	return BytesText(c.Bound())
}

// TestCacheReadTreatsOddFilesAsAbsent: a cache entry that is a named pipe, a link to /dev/zero,
// a folder or larger than the cache's bound is no entry, found at once.
func TestCacheReadTreatsOddFilesAsAbsent(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo.json")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	zero := filepath.Join(dir, "zero.json")
	if err := os.Symlink("/dev/zero", zero); err != nil {
		t.Fatal(err)
	}
	large := filepath.Join(dir, "large")
	if err := os.WriteFile(large, make([]byte, Libc.Bound()+1), 0o644); err != nil {
		t.Fatal(err)
	}
	good := filepath.Join(dir, "good")
	if err := os.WriteFile(good, []byte("musl"), 0o644); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-48 * time.Hour)
	os.Chtimes(good, old, old)
	for _, path := range []string{fifo, zero, dir, large, filepath.Join(dir, "absent")} {
		start := time.Now()
		if data, ok := Libc.Read(path); ok {
			t.Errorf("Read(%s) = %d bytes, want none", path, len(data))
		}
		if d := time.Since(start); d > time.Second {
			t.Errorf("Read(%s) took %s", path, d)
		}
	}
	if data, ok := Libc.Read(good); !ok || string(data) != "musl" {
		t.Errorf("Read(good) = %q, %v", data, ok)
	}
	if info, _ := os.Stat(good); time.Since(info.ModTime()) > time.Minute {
		t.Errorf("a read entry is not marked used: %s", info.ModTime())
	}
}

func TestCacheMax(t *testing.T) {
	for value, want := range map[string]int64{"": DefaultCacheMax, "5GiB": 5 << 30, "500MiB": 500 << 20, "2G": 2 << 30,
		"1000": 1000, "0": 0, "3 GB": 3e9, "64k": 64 << 10} {
		t.Setenv(CacheMaxVariable, value)
		if got, err := CacheMax(); err != nil || got != want {
			t.Errorf("%s=%q: %d, %v; want %d", CacheMaxVariable, value, got, err, want)
		}
	}
	for _, value := range []string{"lots", "5 parsecs", "-1", "GiB", "99999999999999TiB"} {
		t.Setenv(CacheMaxVariable, value)
		if _, err := CacheMax(); !fault.IsInput(err) || !strings.Contains(err.Error(), CacheMaxVariable) {
			t.Errorf("%s=%q: %v, want an input error naming the variable", CacheMaxVariable, value, err)
		}
	}
}

// TestPrune: the least recently used entries go first until the rest fits, an entry the run
// used is kept even over the bound, npm's cache goes whole or not at all, leftovers of stopped
// writes go after a day, and what is not a cache of the table is never touched.
func TestPrune(t *testing.T) {
	root := t.TempDir()
	now := time.Now()
	put := func(path string, size int, age time.Duration) string {
		t.Helper()
		full := filepath.Join(root, path)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, make([]byte, size), 0o644); err != nil {
			t.Fatal(err)
		}
		at := now.Add(-age)
		if err := os.Chtimes(full, at, at); err != nil {
			t.Fatal(err)
		}
		return full
	}
	oldest := put("layers/sha256/aa.tar.gz", 1000, 5*time.Hour)
	npmFile := put("npm/_cacache/content-v2/x", 800, 4*time.Hour)
	put("npm/_logs/debug.log", 10, 4*time.Hour)
	record := put("layers/deps/k.json", 100, 3*time.Hour)
	recent := put("layers/sha256/bb.tar.gz", 1000, 2*time.Hour)
	mine := put("layers/sha256/cc.tar.gz", 1000, 0)
	leftover := put("bases/.partial-123", 50, 30*time.Hour)
	young := put("bases/.partial-456", 50, time.Hour)
	harness := put("bases/layers/sha256/dd.tar.gz", 5000, 100*time.Hour)
	tools := put("tools/oras", 5000, 100*time.Hour)
	staging := put("tmp/install-1/package.json", 5000, 100*time.Hour)

	report, err := Prune(context.Background(), root, 2100, now.Add(-time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	gone := func(path string) bool { _, err := os.Stat(path); return os.IsNotExist(err) }
	for _, p := range []string{oldest, npmFile, leftover, record} {
		if !gone(p) {
			t.Errorf("%s is kept, want it pruned", p)
		}
	}
	for _, p := range []string{recent, mine, young, harness, tools, staging} {
		if gone(p) {
			t.Errorf("%s is pruned, want it kept", p)
		}
	}
	if !gone(filepath.Join(root, "npm")) {
		t.Error("npm's cache is pruned in part, want it whole")
	}
	if report.Before != 1000+810+100+1000+1000+50+50 || report.After != 2050 || len(report.Removed) != 4 || report.Kept != 3 {
		t.Errorf("report: before %d after %d, %d removed, %d kept", report.Before, report.After, len(report.Removed), report.Kept)
	}

	// over the bound with what the run used: kept, the bound waits for the next run
	report, err = Prune(context.Background(), root, 0, now.Add(-time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if gone(mine) || !gone(recent) || report.After != 1050 {
		t.Errorf("with a bound of 0: mine gone %v, recent gone %v, after %d", gone(mine), gone(recent), report.After)
	}
}

// TestPruneTreesAndParts: the records of split layers are entries of their own, and a kept tree
// is one entry, removed whole, used when its folder was made, whatever the times of its files,
// of the size its FolderSizeFile says when it has one.
func TestPruneTreesAndParts(t *testing.T) {
	root := t.TempDir()
	now := time.Now()
	age := func(path string, d time.Duration) {
		t.Helper()
		at := now.Add(-d)
		if err := os.Chtimes(path, at, at); err != nil {
			t.Fatal(err)
		}
	}
	write := func(path string, size int) string {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, make([]byte, size), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	part := write(PartLayers.Path(root, "sha256-aa.gzip-members.json"), 100)
	age(part, 5*time.Hour)
	old := Trees.Path(root, "tree-old")
	age(write(filepath.Join(old, "node_modules", "a", "index.js"), 1000), 100*time.Hour)
	age(old, 3*time.Hour)
	young := Trees.Path(root, "tree-young")
	age(write(filepath.Join(young, "node_modules", "b", "index.js"), 1000), 100*time.Hour) // npm's tarballs' times
	age(young, time.Hour)
	sized := Trees.Path(root, "tree-sized")
	age(write(filepath.Join(sized, "node_modules", "c", "index.js"), 2000), 100*time.Hour)
	if err := os.WriteFile(filepath.Join(sized, FolderSizeFile), []byte("300"), 0o644); err != nil {
		t.Fatal(err)
	}
	age(sized, 30*time.Minute)
	stray := write(Trees.Path(root, "tree-file"), 10) // not a folder: not an entry

	report, err := Prune(context.Background(), root, 1300, now.Add(-time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	gone := func(path string) bool { _, err := os.Stat(path); return os.IsNotExist(err) }
	if !gone(part) || !gone(old) || gone(young) || gone(sized) || gone(stray) {
		t.Errorf("part gone %v, old tree gone %v, young tree gone %v, sized tree gone %v, stray file gone %v: want the part and the old tree pruned",
			gone(part), gone(old), gone(young), gone(sized), gone(stray))
	}
	if report.Before != 2400 || report.After != 1300 || len(report.Removed) != 2 {
		t.Errorf("report: before %d after %d, %d removed", report.Before, report.After, len(report.Removed))
	}
}

// TestPruneBaseRoots: an unpacked base is one entry of the size its FolderSizeFile says, removed
// whole, the least recently used first.
func TestPruneBaseRoots(t *testing.T) {
	root := t.TempDir()
	now := time.Now()
	entry := func(name, size string, used time.Duration) string {
		t.Helper()
		dir := BaseRoots.Path(root, name)
		if err := os.MkdirAll(filepath.Join(dir, "root", "etc"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "root", "etc", "a"), []byte("a"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, FolderSizeFile), []byte(size), 0o644); err != nil {
			t.Fatal(err)
		}
		at := now.Add(-used)
		if err := os.Chtimes(dir, at, at); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	old := entry("sha256-old", "400000000", 48*time.Hour)
	young := entry("sha256-young", "400000000", time.Hour)
	report, err := Prune(context.Background(), root, 500_000_000, now.Add(-time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(old); !os.IsNotExist(err) {
		t.Errorf("the least recently used base is still there: %v", err)
	}
	if _, err := os.Stat(young); err != nil {
		t.Errorf("the base used an hour ago is gone: %v", err)
	}
	if report.Before != 800_000_000 || report.After != 400_000_000 {
		t.Errorf("before %d, after %d", report.Before, report.After)
	}
}
