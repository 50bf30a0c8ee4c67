package layer

import (
	"archive/tar"
	"crypto/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A file of several names is in the layer once: under the first name in the layer's order, and
// as hard links to it under the others (GNU tar and containers/storage write them so; esbuild's
// install makes one of its binary). The bytes depend only on the names, not on the inode.
func TestHardLinksAreWrittenOnce(t *testing.T) {
	big := make([]byte, 256<<10) // incompressible, as a binary nearly is
	if _, err := rand.Read(big); err != nil {
		t.Fatal(err)
	}
	tree := func(link bool) string {
		root := filepath.Join(t.TempDir(), "one")
		for _, dir := range []string{"esbuild/bin", "@esbuild/linux-x64/bin"} {
			if err := os.MkdirAll(filepath.Join(root, dir), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		first := filepath.Join(root, "@esbuild/linux-x64/bin/esbuild")
		if err := os.WriteFile(first, big, 0o755); err != nil {
			t.Fatal(err)
		}
		second := filepath.Join(root, "esbuild/bin/esbuild")
		if link {
			if err := os.Link(first, second); err != nil {
				t.Skipf("no hard links here: %v", err)
			}
		} else if err := os.WriteFile(second, big, 0o755); err != nil {
			t.Fatal(err)
		}
		return root
	}
	cache := WithCacheDir(t.TempDir())
	linked, err := Sources(component(t, tree(true), "one"), cache)
	if err != nil {
		t.Fatal(err)
	}
	list := entries(t, linked)
	const base = "composition/dummies-one/"
	first, second := find(list, base+"@esbuild/linux-x64/bin/esbuild"), find(list, base+"esbuild/bin/esbuild")
	if first == nil || first.Typeflag != tar.TypeReg || first.data != string(big) || first.Mode != 0o755 {
		t.Fatalf("the first name: %+v", first)
	}
	if second == nil || second.Typeflag != tar.TypeLink || second.Linkname != first.Name || second.Size != 0 || second.Mode != 0o755 {
		t.Fatalf("the second name: %+v", second)
	}

	copied, err := Sources(component(t, tree(false), "one"), cache)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := linked.Size()
	b, _ := copied.Size()
	t.Logf("linked %d bytes, two copies %d bytes (compressed)", a, b)
	if a*3 > b*2 {
		t.Errorf("the linked layer is %d bytes against %d for two copies", a, b)
	}
	again, err := Sources(component(t, tree(true), "one"), WithCacheDir(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	if digest(t, again) != digest(t, linked) {
		t.Error("the same tree with its links made another digest")
	}
	for _, e := range list {
		if e.Typeflag == tar.TypeLink && !strings.HasPrefix(e.Linkname, base) {
			t.Errorf("%s links out of the layer: %s", e.Name, e.Linkname)
		}
	}
}
