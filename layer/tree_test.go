package layer

import (
	"archive/tar"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/toa-deploy/toa-deploy/internal/app/lockfile"
	"github.com/toa-deploy/toa-deploy/internal/app/toa"
	"github.com/toa-deploy/toa-deploy/internal/fsys"

	"github.com/toa-deploy/toa-deploy/internal/debianbase"
)

// A bump installed over the kept tree of the lockfile before gives the layers a fresh install of
// the new lockfile gives, byte for byte; a kept tree whose files were touched is not used, and
// the install from an empty folder gives the same layers again.
func TestIncrementalBumpIsAFreshInstall(t *testing.T) {
	npmTest(t)
	root := t.TempDir()
	warnings := &collect{}
	install := func(version string) []string {
		t.Helper()
		c := fixture(t, "split-ms-"+version)
		c.Name, c.Locator = "split", toa.NewLocator("split", "default")
		layers, err := DependencyLayers(context.Background(), c, amd64, 20, WithCacheDir(root), npmCache, WithWarnings(warnings.warn))
		if err != nil {
			t.Fatal(err)
		}
		return digests(t, layers)
	}
	// forget clears the layer records, so that the next install runs npm, and with trees the kept
	// trees, so that it runs npm ci from an empty folder
	forget := func(trees bool) {
		t.Helper()
		os.RemoveAll(fsys.DepsLayers.Dir(root))
		if trees {
			os.RemoveAll(fsys.Trees.Dir(root))
		}
	}

	a := install("2.1.2")
	lodash := keptFile(t, root, "lodash/package.json")
	before := inodeOf(t, lodash)
	incremental := install("2.1.3")
	if inodeOf(t, keptFile(t, root, "lodash/package.json")) != before {
		t.Error("lodash was installed again: the bump was not installed over the kept tree")
	}
	if ms := keptFile(t, root, "ms/package.json"); !strings.Contains(readString(t, ms), `"version": "2.1.3"`) {
		t.Errorf("the kept tree's ms is not 2.1.3: %s", readString(t, ms))
	}
	forget(true)
	fresh := install("2.1.3")
	if !slices.Equal(incremental, fresh) {
		t.Errorf("the bump over the kept tree gave other layers than npm ci:\n%v\n%v", incremental, fresh)
	}

	// back to 2.1.2 over the tree of 2.1.3: the layers of the first install
	forget(false)
	if back := install("2.1.2"); !slices.Equal(back, a) {
		t.Errorf("2.1.2 over the tree of 2.1.3 gave other layers than its first install:\n%v\n%v", back, a)
	}

	// a file of the kept tree changed: not trusted
	target := keptFile(t, root, "lodash/lodash.js")
	f, err := os.OpenFile(target, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("\n;globalThis.tampered = true\n")
	f.Close()
	forget(false)
	if again := install("2.1.3"); !slices.Equal(again, fresh) {
		t.Errorf("over a tampered tree, 2.1.3 gave other layers than npm ci:\n%v\n%v", again, fresh)
	}
	// npm install over the tree would have left lodash as it was: the same version (an inode
	// compared here was reused by the fresh install's files now and then)
	if strings.Contains(readString(t, keptFile(t, root, "lodash/lodash.js")), "globalThis.tampered") {
		t.Error("the tampered tree was installed over")
	}
	if !strings.Contains(warnings.String(), "changed since it was kept") {
		t.Errorf("no warning of the tampered tree: %s", warnings)
	}
}

// A lockfile out of sync with package.json, installed where a tree is kept, is refused as npm
// ci refuses it, with the same error, not installed over the tree by npm install's resolving.
func TestIncrementalOutOfSyncLockfile(t *testing.T) {
	npmTest(t)
	root := t.TempDir()
	component := func(dir string) *toa.Component {
		c := fixture(t, "split-ms-2.1.2")
		c.Name, c.Locator = "split", toa.NewLocator("split", "default")
		if dir != "" {
			c.Path, c.PackageJSON, c.Lockfile = dir, filepath.Join(dir, "package.json"), filepath.Join(dir, "package-lock.json")
		}
		return c
	}
	if _, err := DependencyLayers(context.Background(), component(""), amd64, 20, WithCacheDir(root), npmCache); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	pkg := strings.Replace(readString(t, filepath.Join("testdata", "components", "split-ms-2.1.2", "package.json")),
		`"ms": "2.1.2",`, `"ms": "2.1.2", "is-odd": "3.0.1",`, 1)
	os.WriteFile(filepath.Join(dir, "package.json"), []byte(pkg), 0o644)
	lock := readString(t, filepath.Join("testdata", "components", "split-ms-2.1.3", "package-lock.json"))
	os.WriteFile(filepath.Join(dir, "package-lock.json"), []byte(lock), 0o644)
	_, err := DependencyLayers(context.Background(), component(dir), amd64, 20, WithCacheDir(root), npmCache)
	if !errors.Is(err, ErrLockfileOutOfSync) {
		t.Fatalf("got %v, want the out-of-sync lockfile refused", err)
	}
	if kept, _ := filepath.Glob(filepath.Join(fsys.Trees.Dir(root), "tree-*")); len(kept) != 0 {
		t.Errorf("the kept tree was not tried: %v", kept)
	}
}

// keptFile is the path of a file of the one tree kept under root.
func keptFile(t *testing.T, root, rel string) string {
	t.Helper()
	found, _ := filepath.Glob(filepath.Join(fsys.Trees.Dir(root), "tree-*"))
	if len(found) != 1 {
		t.Fatalf("%d trees kept, want 1: %v", len(found), found)
	}
	return filepath.Join(found[0], "node_modules", filepath.FromSlash(rel))
}

func inodeOf(t *testing.T, path string) uint64 {
	t.Helper()
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return info.Sys().(*syscall.Stat_t).Ino
}

func readString(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// checkTree refuses what npm ci would not have made, and removes the folders npm emptied.
func TestCheckTree(t *testing.T) {
	lock := `{"lockfileVersion":3,"packages":{"":{"name":"x"},
		"node_modules/a":{"version":"1.0.0","integrity":"sha512-a"},
		"node_modules/b":{"version":"2.0.0","integrity":"sha512-b"},
		"node_modules/dev":{"version":"1.0.0","dev":true},
		"node_modules/opt":{"version":"1.0.0","optional":true}}}`
	hidden := `{"lockfileVersion":3,"packages":{
		"node_modules/a":{"version":"1.0.0","integrity":"sha512-a"},
		"node_modules/b":{"version":"2.0.0","integrity":"sha512-b"}}}`
	before := lockfile.Packages{"node_modules/a": {Path: "node_modules/a", Version: "1.0.0", Integrity: "sha512-a"}}
	for _, c := range []struct {
		name  string
		tree  map[string]string // files; "->x" a link to x
		lock  string
		wrong string // in the error; "" for none
	}{
		{"as npm ci", map[string]string{"a/package.json": "{}", "b/package.json": "{}"}, lock, ""},
		{"emptied folders", map[string]string{"a/package.json": "{}", "b/package.json": "{}", ".bin/": "", "a/node_modules/@s/": ""}, lock, ""},
		{"a leftover package", map[string]string{"a/package.json": "{}", "b/package.json": "{}", "c/package.json": "{}"}, lock, "node_modules/c is in node_modules"},
		{"a missing package", map[string]string{"a/package.json": "{}"}, lock, "node_modules/b is in npm's hidden lockfile"},
		{"another version", map[string]string{"a/package.json": "{}", "b/package.json": "{}"},
			strings.Replace(lock, `"2.0.0","integrity":"sha512-b"`, `"2.0.1","integrity":"sha512-c"`, 1), "node_modules/b is 2.0.0"},
		{"a required package npm left out", map[string]string{"a/package.json": "{}", "b/package.json": "{}"},
			strings.Replace(lock, `"optional":true`, `"optional":false`, 1), "node_modules/opt is missing"},
		{"a dangling bin link", map[string]string{"a/package.json": "{}", "b/package.json": "{}", ".bin/gone": "->../c/bin.js"}, lock, "leads nowhere"},
	} {
		t.Run(c.name, func(t *testing.T) {
			modules := filepath.Join(t.TempDir(), "node_modules")
			c.tree[".package-lock.json"] = hidden
			for rel, content := range c.tree {
				p := filepath.Join(modules, filepath.FromSlash(rel))
				if strings.HasSuffix(rel, "/") {
					os.MkdirAll(p, 0o755)
					continue
				}
				os.MkdirAll(filepath.Dir(p), 0o755)
				if target, ok := strings.CutPrefix(content, "->"); ok {
					os.Symlink(target, p)
					continue
				}
				os.WriteFile(p, []byte(content), 0o644)
			}
			want, err := lockfile.Parse([]byte(c.lock))
			if err != nil {
				t.Fatal(err)
			}
			changed, err := checkTree(modules, want, before)
			if c.wrong == "" {
				if err != nil {
					t.Fatal(err)
				}
				if len(changed) != 1 || !changed["b"] {
					t.Errorf("changed %v, want b", changed)
				}
				for _, gone := range []string{".bin", "a/node_modules"} {
					if fileExists(filepath.Join(modules, gone)) {
						t.Errorf("%s was left", gone)
					}
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.wrong) {
				t.Errorf("got %v, want an error with %q", err, c.wrong)
			}
		})
	}
}

// For a foreign target, a bump over the kept tree runs in the base the install scripts of the
// packages npm added or changed only: esbuild's postinstall, which ran there when the tree was
// installed (it links esbuild/bin/esbuild to the arm64 binary), is not run again, and the layers
// are those of a fresh install, whose scripts all run in the base.
func TestIncrementalBumpInTheBase(t *testing.T) {
	npmTest(t)
	if testing.Short() {
		t.Skip("runs npm under QEMU in the base")
	}
	base := debianbase.Image(t, "arm64")
	root := t.TempDir()
	install := func(name string) []string {
		t.Helper()
		c := fixture(t, name)
		c.Name, c.Locator = "esbuild", toa.NewLocator("esbuild", "default")
		layers, err := DependencyLayers(context.Background(), c, arm64, 20, WithCacheDir(root), npmCache,
			WithBase(base), WithBaseNode("18.20.4"))
		if err != nil {
			t.Fatal(err)
		}
		return digests(t, layers)
	}
	stamp := func(rel string) string {
		t.Helper()
		info, err := os.Lstat(keptFile(t, root, rel))
		if err != nil {
			t.Fatal(err)
		}
		s, _ := changeStamp(info)
		return s
	}
	install("esbuild")
	shim, binary := "esbuild/bin/esbuild", "@esbuild/linux-arm64/bin/esbuild"
	if inodeOf(t, keptFile(t, root, shim)) != inodeOf(t, keptFile(t, root, binary)) {
		t.Fatal("esbuild's postinstall did not run in the base: bin/esbuild is not linked to the arm64 binary")
	}
	before := stamp(binary)
	incremental := install("esbuild-bump")
	if after := stamp(binary); after != before {
		t.Error("esbuild's postinstall ran again over the kept tree")
	}
	if !fileExists(keptFile(t, root, "is-number/package.json")) {
		t.Error("is-number was not installed over the kept tree")
	}
	os.RemoveAll(fsys.DepsLayers.Dir(root))
	os.RemoveAll(fsys.Trees.Dir(root))
	if fresh := install("esbuild-bump"); !slices.Equal(incremental, fresh) {
		t.Errorf("the bump over the kept tree gave other layers than a fresh install:\n%v\n%v", incremental, fresh)
	}
}

// A bump that removes a package whose install scripts ran in the kept tree is not installed over
// it: what such a script did outside its folder would stay, where npm ci starts from nothing.
// Here the bump removes the only package with scripts, so its tree has a key of its own (the
// scripts' base is in the key only of a lockfile with scripts; TestScriptsStay has a bump that
// keeps one and removes another): the install is npm ci's (is-number, kept by the bump, is installed anew) beside
// the tree kept before, and its layers are a fresh install's. The first install's esbuild
// postinstall, run in the base, hard-linked its binary into esbuild/bin: the layer holds its
// bytes once.
func TestKeptTreeLeftWhenAScriptedPackageGoes(t *testing.T) {
	npmTest(t)
	base := debianbase.Image(t, "amd64")
	root := t.TempDir()
	install := func(name string) []string {
		t.Helper()
		c := fixture(t, name)
		c.Name, c.Locator = "esbuild", toa.NewLocator("esbuild", "default")
		layers, err := DependencyLayers(context.Background(), c, amd64, 20, WithCacheDir(root), npmCache,
			WithBase(base), WithBaseNode("18.20.4"))
		if err != nil {
			t.Fatal(err)
		}
		if name == "esbuild-bump" {
			hardLinked(t, layers)
		}
		return digests(t, layers)
	}
	install("esbuild-bump")
	first := keptFile(t, root, "is-number/package.json")
	kept := inodeOf(t, first)
	removed := install("esbuild-removed")
	trees, _ := filepath.Glob(filepath.Join(fsys.Trees.Dir(root), "tree-*", "node_modules", "is-number", "package.json"))
	for _, tree := range trees {
		if tree != first && inodeOf(t, tree) == kept {
			t.Errorf("the bump that removed esbuild, whose postinstall ran, was installed over the kept tree: %s", tree)
		}
	}
	if len(trees) != 2 {
		t.Errorf("%d trees kept, want the bump's beside the first: %v", len(trees), trees)
	}
	os.RemoveAll(fsys.DepsLayers.Dir(root))
	os.RemoveAll(fsys.Trees.Dir(root))
	if fresh := install("esbuild-removed"); !slices.Equal(removed, fresh) {
		t.Errorf("the bump gave other layers than a fresh install:\n%v\n%v", removed, fresh)
	}
}

// hardLinked fails unless esbuild's binary is in one of layers and esbuild/bin/esbuild a hard
// link to it, as esbuild's postinstall leaves them.
func hardLinked(t *testing.T, layers []v1.Layer) {
	t.Helper()
	const base = "composition/default-esbuild/node_modules/"
	var binary, link *entry
	for _, l := range layers {
		list := entries(t, l)
		if e := find(list, base+"@esbuild/linux-x64/bin/esbuild"); e != nil {
			binary = e
		}
		if e := find(list, base+"esbuild/bin/esbuild"); e != nil {
			link = e
		}
	}
	if binary == nil || binary.Typeflag != tar.TypeReg || link == nil || link.Typeflag != tar.TypeLink || link.Linkname != binary.Name {
		t.Errorf("esbuild's binary and its hard link: %s, %s", entryString(binary), entryString(link))
	}
}

// TestScriptsStay: an install over a kept tree is refused when it removed or changed a package
// whose install scripts ran in that tree, and left to stand when it only added or changed others.
func TestScriptsStay(t *testing.T) {
	for _, c := range []struct {
		name    string
		present []string
		changed []string
		refused string
	}{
		{"kept", []string{"esbuild", "is-number"}, []string{"is-number"}, ""},
		{"added beside", []string{"esbuild", "is-number", "ms"}, []string{"ms"}, ""},
		{"removed", []string{"is-number"}, nil, "esbuild, whose install scripts ran in the kept tree, was removed"},
		{"changed", []string{"esbuild", "is-number"}, []string{"esbuild"}, "esbuild, whose install scripts ran in the kept tree, changed"},
		{"nested removed", []string{"esbuild", "a"}, nil, "a/node_modules/b, whose install scripts ran in the kept tree, was removed"},
	} {
		t.Run(c.name, func(t *testing.T) {
			modules := t.TempDir()
			for _, p := range c.present {
				if err := os.MkdirAll(filepath.Join(modules, p), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(modules, p, "package.json"), []byte("{}"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			changed := map[string]bool{}
			for _, p := range c.changed {
				changed[p] = true
			}
			kept := &keptTree{scripted: map[string]bool{"esbuild": true}}
			if c.name == "nested removed" {
				kept.scripted = map[string]bool{"esbuild": true, "a/node_modules/b": true}
			}
			err := kept.scriptsStay(modules, changed)
			switch {
			case c.refused == "" && err != nil:
				t.Errorf("refused: %v", err)
			case c.refused != "" && (err == nil || err.Error() != c.refused):
				t.Errorf("got %v, want %q", err, c.refused)
			}
		})
	}
}
