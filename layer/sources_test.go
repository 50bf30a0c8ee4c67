package layer

import (
	"archive/tar"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/toa-deploy/toa-deploy/internal/app/toa"
	"github.com/toa-deploy/toa-deploy/internal/fault"
)

// entry is a tar header, and the contents of a regular file.
type entry struct {
	*tar.Header
	data string
}

// entries reads a layer back, after checking that its digest, diffID and size are its bytes'.
func entries(t *testing.T, l v1.Layer) []entry {
	t.Helper()
	check(t, l)
	r, err := l.Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var list []entry
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return list
		}
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		list = append(list, entry{h, string(data)})
	}
}

// check compares the layer's digest, size and diffID with its bytes.
func check(t *testing.T, l v1.Layer) {
	t.Helper()
	for _, c := range []struct {
		open func() (io.ReadCloser, error)
		want func() (v1.Hash, error)
		size bool
	}{{l.Compressed, l.Digest, true}, {l.Uncompressed, l.DiffID, false}} {
		r, err := c.open()
		if err != nil {
			t.Fatal(err)
		}
		got, n, err := v1.SHA256(r)
		r.Close()
		if err != nil {
			t.Fatal(err)
		}
		want, err := c.want()
		if err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Fatalf("the layer's bytes hash to %s, not %s", got, want)
		}
		if size, _ := l.Size(); c.size && size != n {
			t.Fatalf("the layer has %d bytes, not %d", n, size)
		}
	}
}

func find(list []entry, name string) *entry {
	for i := range list {
		if list[i].Name == name {
			return &list[i]
		}
	}
	return nil
}

func names(list []entry) []string {
	n := make([]string, len(list))
	for i, e := range list {
		n[i] = e.Name
	}
	return n
}

func digest(t *testing.T, l v1.Layer) string {
	t.Helper()
	d, err := l.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d.String()
}

// longName is a path of more than 100 bytes, which USTAR keeps only with its prefix field, and
// a file name of more than 100 bytes, which takes a PAX record.
var (
	longDir  = strings.Repeat("d", 60) + "/" + strings.Repeat("e", 60)
	longFile = strings.Repeat("f", 120) + ".js"
)

// writeTree makes a component folder: files with the given permissions, a symlink, the names that
// are left out, at the root and deeper. The umask and the current time make the modes and
// mtimes on disk differ between calls.
func writeTree(t *testing.T, root string, perm os.FileMode, withPackage bool) {
	t.Helper()
	files := map[string]string{
		"manifest.toa.yaml":          "name: one\nnamespace: dummies\n",
		"operations/transition.js":   "module.exports = 1\n",
		"operations/nested/deep.js":  "// deep\n",
		"bin/run":                    "#!/bin/sh\necho run\n",
		"node_modules/x/index.js":    "excluded",
		"operations/node_modules/y":  "excluded",
		".git/HEAD":                  "ref: refs/heads/main\n",
		"operations/.git":            "gitdir: ../.git/modules/x\n",
		".npmrc":                     "//registry.example.com/:_authToken=secret\n",
		"operations/.npmrc":          "secret",
		longDir + "/" + longFile:     "long\n",
		"ünïcode/ñame.js":            "x\n",
		"a.b":                        "sorts after a/ in a walk\n",
		"a/c":                        "in a/\n",
		"operations/.hidden":         "kept\n",
		"empty/.keep":                "",
		"operations/nested/exe.sh":   "#!/bin/sh\n",
		"operations/nested/ro.json":  "{}\n",
		"operations/nested/sub/z.js": "",
	}
	if withPackage {
		files["package.json"] = `{"name":"own"}` + "\n"
	}
	for name, data := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		mode := perm
		if name == "bin/run" || name == "operations/nested/exe.sh" {
			mode |= 0o100 // the owner's execute bit only
		}
		if err := os.WriteFile(p, []byte(data), mode); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("../operations/transition.js", filepath.Join(root, "bin", "link.js")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc/passwd", filepath.Join(root, "absolute")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(root, "emptydir"), 0o700); err != nil {
		t.Fatal(err)
	}
	when := time.Now().Add(-time.Duration(perm) * time.Hour)
	filepath.Walk(root, func(p string, _ os.FileInfo, _ error) error { return os.Chtimes(p, when, when) })
}

func component(t *testing.T, root string, name string) *toa.Component {
	t.Helper()
	c := &toa.Component{Path: root, Name: name, Namespace: "dummies", Locator: toa.NewLocator(name, "dummies"), ModuleType: "module"}
	if _, err := os.Stat(filepath.Join(root, "package.json")); err == nil {
		c.PackageJSON = filepath.Join(root, "package.json")
	}
	return c
}

func TestSourcesAreTheSameInAnyFolder(t *testing.T) {
	cache := WithCacheDir(t.TempDir())
	var digests []string
	for _, perm := range []os.FileMode{0o644, 0o600, 0o664} {
		root := filepath.Join(t.TempDir(), "elsewhere", "one")
		writeTree(t, root, perm, false)
		l, err := Sources(component(t, root, "one"), cache)
		if err != nil {
			t.Fatal(err)
		}
		digests = append(digests, digest(t, l))
	}
	if digests[0] != digests[1] || digests[1] != digests[2] {
		t.Errorf("the same tree in three folders made %v", digests)
	}
}

func TestSourcesEntries(t *testing.T) {
	root := filepath.Join(t.TempDir(), "one")
	writeTree(t, root, 0o600, false)
	c := component(t, root, "one")
	l, err := Sources(c, WithCacheDir(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	list := entries(t, l)
	const base = "composition/dummies-one/"

	for _, gone := range []string{"node_modules/", "node_modules/x/index.js", "operations/node_modules/", ".git/", ".git/HEAD",
		"operations/.git", ".npmrc", "operations/.npmrc"} {
		if e := find(list, base+gone); e != nil {
			t.Errorf("%s is in the layer", gone)
		}
	}
	for _, kept := range []string{"manifest.toa.yaml", "operations/.hidden", "empty/.keep", "emptydir/", longDir + "/" + longFile, "ünïcode/ñame.js"} {
		if find(list, base+kept) == nil {
			t.Errorf("%s is not in the layer", kept)
		}
	}
	if p := find(list, base+"package.json"); p == nil || p.data != string(c.Declared()) {
		t.Errorf("the declared package.json is not in the layer: %+v", p)
	} else if !strings.Contains(p.data, `"type": "module"`) || !strings.Contains(p.data, `"name": "dummies-one"`) {
		t.Errorf("declared package.json: %s", p.data)
	}

	// directories before what they hold, and each directory's entries in order of their names
	want := []string{"composition/", base, base + "a/", base + "a/c", base + "a.b", base + "absolute", base + "bin/",
		base + "bin/link.js", base + "bin/run", base + longDir[:60] + "/"}
	if got := names(list)[:len(want)]; strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("the layer begins with\n%v, not\n%v", got, want)
	}
	seen := map[string]bool{}
	for _, e := range list {
		if parent := filepath.Dir(strings.TrimSuffix(e.Name, "/")) + "/"; parent != "./" && !seen[parent] {
			t.Errorf("%s comes before its folder", e.Name)
		}
		seen[e.Name] = true
	}

	for _, e := range list {
		if e.Uid != 0 || e.Gid != 0 || e.Uname != "" || e.Gname != "" {
			t.Errorf("%s: owner %d:%d %q:%q", e.Name, e.Uid, e.Gid, e.Uname, e.Gname)
		}
		if !e.ModTime.Equal(time.Unix(0, 0)) {
			t.Errorf("%s: mtime %v", e.Name, e.ModTime)
		}
		if len(e.Xattrs) > 0 || len(e.PAXRecords) > 0 && !onlyNames(e.PAXRecords) {
			t.Errorf("%s: extended records %v", e.Name, e.PAXRecords)
		}
		want := int64(0o644)
		switch {
		case e.Typeflag == tar.TypeDir, strings.HasSuffix(e.Name, "bin/run"), strings.HasSuffix(e.Name, "exe.sh"):
			want = 0o755
		case e.Typeflag == tar.TypeSymlink:
			want = 0o777
		}
		if e.Mode != want {
			t.Errorf("%s: mode %o, want %o", e.Name, e.Mode, want)
		}
	}
	if e := find(list, base+"bin/link.js"); e == nil || e.Typeflag != tar.TypeSymlink || e.Linkname != "../operations/transition.js" {
		t.Errorf("bin/link.js is not the symlink it was: %+v", e)
	}
	if e := find(list, base+"absolute"); e == nil || e.Linkname != "/etc/passwd" {
		t.Errorf("absolute is not the symlink it was: %+v", e)
	}
}

func onlyNames(records map[string]string) bool {
	for k := range records {
		if k != "path" && k != "linkpath" {
			return false
		}
	}
	return true
}

func TestSourcesKeepTheirOwnPackageJSON(t *testing.T) {
	root := filepath.Join(t.TempDir(), "one")
	writeTree(t, root, 0o644, true)
	l, err := Sources(component(t, root, "one"), WithCacheDir(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	if p := find(entries(t, l), "composition/dummies-one/package.json"); p == nil || p.data != `{"name":"own"}`+"\n" {
		t.Errorf("package.json: %+v", p)
	}
}

func TestSourceDateEpoch(t *testing.T) {
	root := filepath.Join(t.TempDir(), "one")
	writeTree(t, root, 0o644, false)
	c := component(t, root, "one")
	cache := WithCacheDir(t.TempDir())
	zero, err := Sources(c, cache)
	if err != nil {
		t.Fatal(err)
	}

	t.Setenv("SOURCE_DATE_EPOCH", "1700000000")
	l, err := Sources(c, cache)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries(t, l) {
		if !e.ModTime.Equal(time.Unix(1700000000, 0)) {
			t.Fatalf("%s: mtime %v", e.Name, e.ModTime)
		}
	}
	if digest(t, l) == digest(t, zero) {
		t.Error("SOURCE_DATE_EPOCH did not change the digest")
	}
	again, _ := Sources(c, cache, WithEpoch(time.Unix(1700000000, 999)))
	if digest(t, again) != digest(t, l) {
		t.Error("WithEpoch and SOURCE_DATE_EPOCH of the same second differ")
	}

	t.Setenv("SOURCE_DATE_EPOCH", "yesterday")
	if _, err := Sources(c, cache); !fault.IsInput(err) || !strings.Contains(err.Error(), "SOURCE_DATE_EPOCH") {
		t.Errorf("a SOURCE_DATE_EPOCH that is not a number: %v", err)
	}
}

func TestSourcesOf(t *testing.T) {
	dir := t.TempDir()
	var a, b *toa.Component
	for _, name := range []string{"alpha", "beta"} {
		root := filepath.Join(dir, name)
		writeTree(t, root, 0o644, false)
		c := component(t, root, name)
		if name == "alpha" {
			a = c
		} else {
			b = c
		}
	}
	cache := WithCacheDir(t.TempDir())
	ab, err := SourcesOf([]*toa.Component{a, b}, cache)
	if err != nil {
		t.Fatal(err)
	}
	ba, err := SourcesOf([]*toa.Component{b, a}, cache)
	if err != nil {
		t.Fatal(err)
	}
	if digest(t, ab) != digest(t, ba) {
		t.Error("the order of the components changed the layer")
	}
	list := entries(t, ab)
	first, second := -1, -1
	for i, e := range list {
		if e.Name == "composition/dummies-alpha/manifest.toa.yaml" {
			first = i
		}
		if e.Name == "composition/dummies-beta/manifest.toa.yaml" {
			second = i
		}
		if e.Name == "composition/" && i != 0 {
			t.Error("composition/ written twice")
		}
	}
	if first < 0 || second < first {
		t.Errorf("alpha at %d, beta at %d", first, second)
	}
	if _, err := SourcesOf([]*toa.Component{a, a}, cache); err == nil {
		t.Error("two components of one label made a layer")
	}
}

func TestSourcesAreLazy(t *testing.T) {
	root := filepath.Join(t.TempDir(), "one")
	writeTree(t, root, 0o644, false)
	cache := t.TempDir()
	l, err := Sources(component(t, root, "one"), WithCacheDir(cache))
	if err != nil {
		t.Fatal(err)
	}
	blobs := filepath.Join(cache, "layers", "sha256")
	if _, err := os.Stat(blobs); err == nil {
		t.Error("the layer was written before it was asked for")
	}
	d := digest(t, l)
	if _, err := os.Stat(filepath.Join(blobs, strings.TrimPrefix(d, "sha256:")+".tar.gz")); err != nil {
		t.Errorf("the layer is not in the cache under its digest: %v", err)
	}
	// the tree is read once: a change after the first call changes nothing
	os.WriteFile(filepath.Join(root, "manifest.toa.yaml"), []byte("changed"), 0o644)
	if digest(t, l) != d {
		t.Error("the digest changed")
	}
	if _, err := Sources(component(t, filepath.Join(t.TempDir(), "missing"), "one")); err == nil {
		t.Error("a missing folder made a layer")
	}
}

// BenchmarkSources writes the folder $TOA_BENCH_TREE as a sources layer and reports MB/s of the
// tar stream; compare with `tar -cf - -C $TOA_BENCH_TREE . | gzip -6 | wc -c`.
func BenchmarkSources(b *testing.B) {
	tree := os.Getenv("TOA_BENCH_TREE")
	if tree == "" {
		b.Skip("set TOA_BENCH_TREE to a large folder")
	}
	c := &toa.Component{Path: tree, Locator: toa.NewLocator("bench", "default"), PackageJSON: "x"}
	cache := b.TempDir()
	l, err := Sources(c, WithCacheDir(cache))
	if err != nil {
		b.Fatal(err)
	}
	r, err := l.Uncompressed()
	if err != nil {
		b.Fatal(err)
	}
	n, _ := io.Copy(io.Discard, r)
	r.Close()
	size, _ := l.Size()
	b.SetBytes(n)
	for b.Loop() {
		l, err := Sources(c, WithCacheDir(cache))
		if err != nil {
			b.Fatal(err)
		}
		if _, err := l.Digest(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(size)/1e6, "MB-compressed")
}
