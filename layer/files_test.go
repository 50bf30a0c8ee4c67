package layer

import (
	"archive/tar"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestFiles(t *testing.T) {
	src := t.TempDir()
	os.WriteFile(filepath.Join(src, "node"), []byte("an executable"), 0o700)
	pkg := filepath.Join(src, "runtime")
	os.MkdirAll(filepath.Join(pkg, "bin"), 0o755)
	os.WriteFile(filepath.Join(pkg, "package.json"), []byte("{}"), 0o600)
	os.WriteFile(filepath.Join(pkg, "bin", "toa"), []byte("#!/usr/bin/env node\n"), 0o755)
	files := []File{
		{Name: "usr/local/bin/toa", Link: "../lib/node_modules/@toa.io/runtime/bin/toa"},
		{Name: "etc/passwd", Data: []byte("root:x:0:0::/root:/sbin/nologin\n")},
		{Name: "usr/local/bin/node", Source: filepath.Join(src, "node")},
		{Name: "usr/local/lib/node_modules/@toa.io/runtime", Source: pkg},
		{Name: "tmp", Dir: true},
	}
	cache := t.TempDir()
	l, err := Files(files, WithCacheDir(cache), WithEpoch(time.Unix(0, 0)))
	if err != nil {
		t.Fatal(err)
	}
	list := entries(t, l)
	want := "etc/ etc/passwd tmp/ usr/ usr/local/ usr/local/bin/ usr/local/bin/node usr/local/bin/toa usr/local/lib/ " +
		"usr/local/lib/node_modules/ usr/local/lib/node_modules/@toa.io/ usr/local/lib/node_modules/@toa.io/runtime/ " +
		"usr/local/lib/node_modules/@toa.io/runtime/bin/ usr/local/lib/node_modules/@toa.io/runtime/bin/toa " +
		"usr/local/lib/node_modules/@toa.io/runtime/package.json"
	if got := strings.Join(names(list), " "); got != want {
		t.Errorf("entries\n%s\nwant\n%s", got, want)
	}
	for name, mode := range map[string]int64{"usr/local/bin/node": 0o755, "etc/passwd": 0o644, "tmp/": 0o755,
		"usr/local/lib/node_modules/@toa.io/runtime/package.json": 0o644} {
		if e := find(list, name); e == nil || e.Mode != mode || e.Uid != 0 || !e.ModTime.Equal(time.Unix(0, 0)) {
			t.Errorf("%s: %+v", name, e)
		}
	}
	if e := find(list, "usr/local/bin/toa"); e == nil || e.Typeflag != tar.TypeSymlink {
		t.Errorf("toa is not a symlink: %+v", e)
	}

	// the same files give the same layer, from the cache, and from another cache the same bytes
	again, err := Files(files, WithCacheDir(cache), WithEpoch(time.Unix(0, 0)))
	if err != nil {
		t.Fatal(err)
	}
	elsewhere, err := Files(files, WithCacheDir(t.TempDir()), WithEpoch(time.Unix(0, 0)))
	if err != nil {
		t.Fatal(err)
	}
	if digest(t, again) != digest(t, l) || digest(t, elsewhere) != digest(t, l) {
		t.Errorf("digests %s, %s, %s", digest(t, l), digest(t, again), digest(t, elsewhere))
	}
	if _, err := Files(append(files, File{Name: "tmp/", Dir: true}), WithCacheDir(cache)); err == nil {
		t.Error("two entries of one name were accepted")
	}
}
