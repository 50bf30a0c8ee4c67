package layer

import (
	"archive/tar"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/toa-deploy/toa-deploy/internal/app/toa"
)

// modulesTree writes a node_modules folder as npm lays one out: its metadata, .bin links, a
// large package, a scoped one, forty small ones (ms at version), and two that share a file
// through a hard link. It returns the folder.
func modulesTree(t *testing.T, root, msVersion string) string {
	t.Helper()
	dir := filepath.Join(root, "node_modules")
	write := func(rel string, data []byte) {
		t.Helper()
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	big := make([]byte, 2<<20) // incompressible, as a binary nearly is, and the same each time
	rand.NewChaCha8([32]byte{}).Read(big)
	write(".package-lock.json", []byte(`{"name":"x","lockfileVersion":3,"packages":{"node_modules/ms":{"version":"`+msVersion+`"}}}`))
	write("typescript/lib/typescript.js", big)
	write("typescript/package.json", []byte(`{"name":"typescript","version":"5.7.2"}`))
	write("@aws-sdk/client-s3/package.json", []byte(`{"name":"@aws-sdk/client-s3","version":"3.700.0"}`))
	write("ms/package.json", []byte(`{"name":"ms","version":"`+msVersion+`"}`))
	write("ms/index.js", []byte("module.exports = () => '"+msVersion+"'\n"))
	for i := range 40 {
		write(fmt.Sprintf("small-%02d/index.js", i), []byte(strings.Repeat(fmt.Sprintf("exports.n = %d\n", i), 50)))
	}
	write("linked-a/bin/tool", big[:300<<10])
	if err := os.MkdirAll(filepath.Join(dir, "linked-b/bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(filepath.Join(dir, "linked-a/bin/tool"), filepath.Join(dir, "linked-b/bin/tool")); err != nil {
		t.Skipf("no hard links here: %v", err)
	}
	if err := os.MkdirAll(filepath.Join(dir, ".bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../typescript/bin/tsc", filepath.Join(dir, ".bin/tsc")); err != nil {
		t.Fatal(err)
	}
	return dir
}

// splitLayers writes the parts of dir as layers with a cache of their own.
func splitLayers(t *testing.T, dir string, budget int) ([]part, []v1.Layer) {
	t.Helper()
	parts, err := splitModules(dir, "composition/shop-orders/node_modules", budget)
	if err != nil {
		t.Fatal(err)
	}
	o, err := newOptions([]Option{WithCacheDir(t.TempDir())})
	if err != nil {
		t.Fatal(err)
	}
	var layers []v1.Layer
	for _, p := range parts {
		l, err := o.writePart(p)
		if err != nil {
			t.Fatal(err)
		}
		layers = append(layers, l)
	}
	return parts, layers
}

func digests(t *testing.T, layers []v1.Layer) []string {
	t.Helper()
	var out []string
	for _, l := range layers {
		d, err := l.Digest()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, d.String())
	}
	return out
}

func TestSplitLaysOutNodeModules(t *testing.T) {
	dir := modulesTree(t, t.TempDir(), "2.1.2")
	parts, layers := splitLayers(t, dir, 40)
	if parts[0].what != "metadata" || strings.Join(parts[0].entries, " ") != ".bin .package-lock.json" {
		t.Errorf("the first layer is %s of %v, not the metadata", parts[0].what, parts[0].entries)
	}
	if parts[1].what != "typescript" || len(parts[1].entries) != 1 {
		t.Errorf("the second layer is %s of %v, not typescript alone", parts[1].what, parts[1].entries)
	}
	if len(parts) > 1+1+MaxBuckets {
		t.Errorf("%d layers, more than metadata, typescript and %d buckets", len(parts), MaxBuckets)
	}
	// every package is in exactly one layer, linked-a and linked-b in the same one
	where := map[string]int{}
	for i, l := range layers {
		for _, e := range entries(t, l) {
			rel, ok := strings.CutPrefix(e.Name, "composition/shop-orders/node_modules/")
			if !ok || rel == "" || e.Typeflag == tar.TypeDir && strings.Count(rel, "/") <= 1 {
				continue
			}
			pkg := strings.SplitN(rel, "/", 3)
			name := pkg[0]
			if strings.HasPrefix(name, "@") {
				name += "/" + pkg[1]
			}
			if prev, seen := where[name]; seen && prev != i {
				t.Errorf("%s is in layers %d and %d", name, prev, i)
			}
			where[name] = i
			if e.Typeflag == tar.TypeLink && !strings.HasPrefix(e.Linkname, "composition/shop-orders/node_modules/linked-a/") {
				t.Errorf("%s links to %s", e.Name, e.Linkname)
			}
		}
	}
	if len(where) != 47 { // .bin, .package-lock.json, typescript, @aws-sdk/client-s3, ms, 40 small, 2 linked
		t.Errorf("%d names in the layers, want 47: %v", len(where), where)
	}
	if where["linked-a"] != where["linked-b"] {
		t.Errorf("linked-a is in layer %d, linked-b in %d: a hard link would point into another layer", where["linked-a"], where["linked-b"])
	}
}

// A bump of ms changes npm's metadata and the bucket that holds ms: every other layer keeps its
// digest. The layers are the same from another folder.
func TestSplitBumpChangesOnlyItsLayers(t *testing.T) {
	_, before := splitLayers(t, modulesTree(t, t.TempDir(), "2.1.2"), 40)
	_, again := splitLayers(t, modulesTree(t, filepath.Join(t.TempDir(), "elsewhere"), "2.1.2"), 40)
	_, after := splitLayers(t, modulesTree(t, t.TempDir(), "2.1.3"), 40)
	a, b, c := digests(t, before), digests(t, again), digests(t, after)
	if strings.Join(a, " ") != strings.Join(b, " ") {
		t.Errorf("the layers from another folder differ:\n%v\n%v", a, b)
	}
	if len(a) != len(c) {
		t.Fatalf("%d layers before the bump, %d after", len(a), len(c))
	}
	var changed []int
	for i := range a {
		if a[i] != c[i] {
			changed = append(changed, i)
		}
	}
	if len(changed) != 2 || changed[0] != 0 {
		t.Errorf("layers %v changed with ms, want the metadata (0) and ms's bucket", changed)
	}
}

// A budget of one layer, or of an empty node_modules, is Dependencies' one layer; the smallest
// split keeps the metadata apart and packages in one bucket.
func TestSplitBudgets(t *testing.T) {
	dir := modulesTree(t, t.TempDir(), "2.1.2")
	if s := splitter(1, func(string) string { return dir }, "x"); s != nil {
		t.Error("a budget of 1 splits")
	}
	for _, c := range []struct{ budget, layers int }{{2, 2}, {3, 3}, {5, 5}} {
		parts, err := splitModules(dir, "composition/shop-orders/node_modules", c.budget)
		if err != nil {
			t.Fatal(err)
		}
		if len(parts) > c.layers {
			t.Errorf("budget %d: %d layers", c.budget, len(parts))
		}
	}
}

// A real bump from the npm registry: ms 2.1.2 → 2.1.3 (debug's nested ms goes with it). Only
// npm's metadata and the buckets of ms and debug change; lodash, over a MiB, is a layer of its
// own.
func TestDependencyLayersOfABump(t *testing.T) {
	npmTest(t)
	cache := WithCacheDir(t.TempDir())
	install := func(version string) ([]v1.Layer, []string) {
		t.Helper()
		c := fixture(t, "split-ms-"+version)
		c.Name, c.Locator = "split", toa.NewLocator("split", "default")
		layers, err := DependencyLayers(context.Background(), c, amd64, 20, cache, npmCache)
		if err != nil {
			t.Fatal(err)
		}
		return layers, digests(t, layers)
	}
	before, a := install("2.1.2")
	after, b := install("2.1.3")
	if len(a) < 4 || len(a) > 20 || len(b) > 20 {
		t.Fatalf("%d layers before the bump, %d after: want a split within 20", len(a), len(b))
	}
	if again, _ := install("2.1.2"); fmt.Sprint(digests(t, again)) != fmt.Sprint(a) {
		t.Errorf("the same lockfile gave other layers from the cache")
	}
	unchanged := map[string]bool{}
	for _, d := range a {
		unchanged[d] = true
	}
	var sent, total int64
	for i, l := range after {
		size, _ := l.Size()
		total += size
		if unchanged[b[i]] {
			continue
		}
		sent += size
		names := strings.Join(names(entries(t, l)), " ")
		if i > 0 && !strings.Contains(names, "/node_modules/ms/") && !strings.Contains(names, "/node_modules/debug/") {
			t.Errorf("layer %d changed with ms, but holds neither ms nor debug: %.300s", i, names)
		}
	}
	t.Logf("%d layers; the bump sends %d of %d bytes", len(after), sent, total)
	if first := entries(t, before[0]); find(first, "composition/default-split/node_modules/.package-lock.json") == nil {
		t.Error("the first layer has no hidden lockfile")
	}
}

// A part whose files did not change is taken from the cache by their stats, without reading
// them; a file written since, even to the same size and modification time, changes its change
// time, and the part is read and written again, with the new bytes.
func TestSplitPartsByStats(t *testing.T) {
	dir := modulesTree(t, t.TempDir(), "2.1.2")
	parts, err := splitModules(dir, "composition/shop-orders/node_modules", 40)
	if err != nil {
		t.Fatal(err)
	}
	o, err := newOptions([]Option{WithCacheDir(t.TempDir())})
	if err != nil {
		t.Fatal(err)
	}
	write := func() []v1.Layer {
		t.Helper()
		var layers []v1.Layer
		for _, p := range parts {
			l, err := o.writePart(p)
			if err != nil {
				t.Fatal(err)
			}
			layers = append(layers, l)
		}
		return layers
	}
	first := digests(t, write())
	mtime, err := o.mtime()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range parts {
		key, err := partStatKey(p, mtime)
		if err != nil {
			t.Fatal(err)
		}
		if o.lookup(partsKind, key) == nil {
			t.Errorf("%s is not kept by its stats", p.what)
		}
	}
	if again := digests(t, write()); fmt.Sprint(again) != fmt.Sprint(first) {
		t.Errorf("the same files gave other layers:\n%v\n%v", first, again)
	}
	ms := filepath.Join(dir, "ms", "index.js")
	info, err := os.Stat(ms)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(ms, []byte("module.exports = () => 'X.X.X'\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	os.Chtimes(ms, info.ModTime(), info.ModTime())
	after := digests(t, write())
	changed := 0
	for i := range after {
		if after[i] != first[i] {
			changed++
		}
	}
	if changed != 1 {
		t.Errorf("%d layers changed with ms's index.js, want its bucket's", changed)
	}
}
