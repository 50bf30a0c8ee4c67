package attest

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/toa-deploy/toa-deploy/internal/app/lockfile"
	"github.com/toa-deploy/toa-deploy/internal/app/toa"
)

// entry is one tar entry of a test layer: a folder (name ends in /), a link or a file.
type entry struct {
	name, data, link string
}

func tarOf(t *testing.T, entries ...entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Mode: 0o644, Typeflag: tar.TypeReg, Size: int64(len(e.data))}
		switch {
		case e.link != "":
			h.Typeflag, h.Linkname, h.Size = tar.TypeSymlink, e.link, 0
		case e.name[len(e.name)-1] == '/':
			h.Typeflag, h.Mode, h.Size = tar.TypeDir, 0o755, 0
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(tw, e.data); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// failingAfter reads data, then fails: what is past it must not be read.
type failingAfter struct{ r io.Reader }

func (f *failingAfter) Read(p []byte) (int, error) {
	n, err := f.r.Read(p)
	if errors.Is(err, io.EOF) {
		return n, errors.New("read past the hidden lockfile")
	}
	return n, err
}

// The hidden lockfile npm 11.19 wrote for `npm ci --omit=dev --os linux --cpu arm64` of
// testdata/installed/package.json: is-number is a dev dependency, and of esbuild's platform
// packages only linux-arm64 was installed.
func TestInstalledInReadsTheHiddenLockfileAndStops(t *testing.T) {
	lock, err := os.ReadFile("testdata/installed/linux-arm64.package-lock.json")
	if err != nil {
		t.Fatal(err)
	}
	head := tarOf(t,
		entry{name: "composition/"},
		entry{name: "composition/shop-orders/"},
		entry{name: "composition/shop-orders/node_modules/"},
		entry{name: "composition/shop-orders/node_modules/.bin/"},
		entry{name: "composition/shop-orders/node_modules/.bin/esbuild", link: "../esbuild/bin/esbuild"},
		entry{name: "composition/shop-orders/node_modules/.package-lock.json", data: string(lock)},
	)
	// the rest of the stream is never read: cut the end-of-archive blocks and fail after
	in, err := readInstall(&failingAfter{bytes.NewReader(head[:len(head)-1024])})
	if err != nil {
		t.Fatal(err)
	}
	if in.Root != "composition/shop-orders" {
		t.Errorf("root %q", in.Root)
	}
	got := map[string]Package{}
	for _, p := range in.Packages {
		got[p.Path] = p
	}
	if len(got) != 4 {
		t.Errorf("packages %v, want ms, debug, esbuild and @esbuild/linux-arm64", in.Packages)
	}
	ms := got["node_modules/ms"]
	if ms.Name != "ms" || ms.Version != "2.1.3" || ms.License != "MIT" || ms.Integrity == "" {
		t.Errorf("ms: %+v", ms)
	}
	arm := got["node_modules/@esbuild/linux-arm64"]
	if arm.Name != "@esbuild/linux-arm64" || arm.Version != "0.25.12" || !arm.Optional {
		t.Errorf("esbuild's platform package: %+v", arm)
	}
	if d := got["node_modules/debug"].Dependencies; !reflect.DeepEqual(d, []string{"node_modules/ms"}) {
		t.Errorf("debug depends on %v, want ms", d)
	}
	if d := got["node_modules/esbuild"].Dependencies; !reflect.DeepEqual(d, []string{"node_modules/@esbuild/linux-arm64"}) {
		t.Errorf("esbuild depends on %v, want only the installed platform package", d)
	}
	if _, dev := got["node_modules/is-number"]; dev {
		t.Error("a dev dependency is listed")
	}
}

// npm's global installs write no hidden lockfile: their package.json files say what they are.
func TestInstalledInReadsPackageJSONWithoutALockfile(t *testing.T) {
	layer := tarOf(t,
		entry{name: "usr/local/bin/"},
		entry{name: "usr/local/bin/semver", link: "../lib/node_modules/semver/bin/semver.js"},
		entry{name: "usr/local/lib/node_modules/"},
		entry{name: "usr/local/lib/node_modules/semver/"},
		entry{name: "usr/local/lib/node_modules/semver/package.json", data: `{"name":"semver","version":"7.7.1","license":"ISC","dependencies":{"lru":"^1"}}`},
		entry{name: "usr/local/lib/node_modules/semver/node_modules/lru/package.json", data: `{"name":"lru","version":"1.0.0","license":{"type":"MIT"}}`},
		entry{name: "usr/local/lib/node_modules/semver/lib/package.json", data: `{"type":"commonjs"}`},
		entry{name: "usr/local/lib/node_modules/@s/p/package.json", data: `{"name":"@s/p","version":"2.0.0","license":"SEE LICENSE IN LICENSE"}`},
	)
	in, err := readInstall(bytes.NewReader(layer))
	if err != nil {
		t.Fatal(err)
	}
	want := &Install{Root: "usr/local/lib", Packages: []Package{
		{Name: "@s/p", Version: "2.0.0", License: "SEE LICENSE IN LICENSE", Path: "node_modules/@s/p"},
		{Name: "semver", Version: "7.7.1", License: "ISC", Path: "node_modules/semver", Dependencies: []string{"node_modules/semver/node_modules/lru"}},
		{Name: "lru", Version: "1.0.0", License: "MIT", Path: "node_modules/semver/node_modules/lru"},
	}}
	if !reflect.DeepEqual(in, want) {
		t.Errorf("got  %+v\nwant %+v", in, want)
	}
}

func TestInstalledInWithoutNodeModules(t *testing.T) {
	in, err := readInstall(bytes.NewReader(tarOf(t, entry{name: "composition/a/index.js", data: "x"}, entry{name: "composition/a/package.json", data: "{}"})))
	if err != nil || in != nil {
		t.Errorf("got %v, %v; want nothing", in, err)
	}
}

func TestPackageRoot(t *testing.T) {
	for _, c := range []struct {
		name, root, path string
		ok               bool
	}{
		{"composition/a/node_modules/ms/package.json", "composition/a", "node_modules/ms", true},
		{"composition/a/node_modules/@s/p/package.json", "composition/a", "node_modules/@s/p", true},
		{"composition/a/node_modules/a/node_modules/b/package.json", "composition/a", "node_modules/a/node_modules/b", true},
		{"node_modules/ms/package.json", "", "node_modules/ms", true},
		{"composition/a/node_modules/ms/lib/package.json", "", "", false},
		{"composition/a/node_modules/@s/package.json", "", "", false},
		{"composition/a/package.json", "", "", false},
		{"composition/a/node_modules/ms/index.js", "", "", false},
	} {
		root, path, ok := packageRoot(c.name)
		if root != c.root || path != c.path || ok != c.ok {
			t.Errorf("packageRoot(%q) = %q, %q, %v; want %q, %q, %v", c.name, root, path, ok, c.root, c.path, c.ok)
		}
	}
}

func TestParseLockfileRefusesOldLockfiles(t *testing.T) {
	if _, err := parseLockfile(bytes.NewReader([]byte(`{"lockfileVersion":1,"dependencies":{}}`))); err == nil {
		t.Error("a lockfile of npm 6 was read")
	}
}

func TestFillFromTheLockfile(t *testing.T) {
	in := &Install{Root: "composition/a", Packages: []Package{{Name: "ms", Version: "2.1.3", Path: "node_modules/ms"}, {Name: "x", Version: "2", Path: "node_modules/x"}}}
	locked := []Package{{Path: "node_modules/ms", Version: "2.1.3", Resolved: "https://registry.example/ms/-/ms-2.1.3.tgz", Integrity: "sha512-AA=="},
		{Path: "node_modules/x", Version: "1", Resolved: "https://registry.example/x/-/x-1.tgz"}}
	out := fillFrom(in, locked)
	if out.Packages[0].Resolved == "" || out.Packages[0].Integrity != "sha512-AA==" {
		t.Errorf("ms not filled in: %+v", out.Packages[0])
	}
	if out.Packages[1].Resolved != "" {
		t.Errorf("x filled in from another version: %+v", out.Packages[1])
	}
	if in.Packages[0].Resolved != "" {
		t.Error("the install was changed in place")
	}
}

// The base's npm packages: every package.json under a node_modules folder of any layer (npm
// and its bundled packages, a runtime installed with `npm i -g`), the layers laid over each
// other the lowest first: a whiteout removes a package, an opaque folder what was below it.
func TestBaseInstalls(t *testing.T) {
	read := func(entries ...entry) *layerPackages {
		t.Helper()
		l, err := readLayerPackages(bytes.NewReader(tarOf(t, entries...)))
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	pkg := func(name, version string) string { return `{"name":"` + name + `","version":"` + version + `"}` }
	lower := read(
		entry{name: "usr/local/lib/node_modules/npm/package.json", data: pkg("npm", "10.8.2")},
		entry{name: "usr/local/lib/node_modules/npm/node_modules/semver/package.json", data: pkg("semver", "7.6.0")},
		entry{name: "usr/local/lib/node_modules/npm/docs/package.json", data: pkg("docs", "1.0.0")}, // not a package of node_modules
		entry{name: "usr/local/lib/node_modules/corepack/package.json", data: pkg("corepack", "0.29.0")},
		entry{name: "opt/app/node_modules/left/package.json", data: pkg("left", "1.0.0")},
		entry{name: "usr/local/lib/node_modules/broken/package.json", data: "not json"},
	)
	upper := read(
		entry{name: "usr/local/lib/node_modules/.wh.corepack"},
		entry{name: "opt/app/.wh..wh..opq"},
		entry{name: "usr/local/lib/node_modules/npm/node_modules/semver/package.json", data: pkg("semver", "7.6.3")},
		entry{name: "usr/local/lib/node_modules/@toa.io/runtime/package.json", data: pkg("@toa.io/runtime", "1.0.0-alpha.289")},
	)
	got := map[string]string{}
	for _, in := range baseInstalls([]*layerPackages{lower, upper}) {
		for _, p := range in.Packages {
			got["/"+in.Root+"/"+p.Path] = p.Name + "@" + p.Version
		}
	}
	want := map[string]string{
		"/usr/local/lib/node_modules/npm":                     "npm@10.8.2",
		"/usr/local/lib/node_modules/npm/node_modules/semver": "semver@7.6.3",
		"/usr/local/lib/node_modules/@toa.io/runtime":         "@toa.io/runtime@1.0.0-alpha.289",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("the base's packages %v, want %v", got, want)
	}
}

// The lockfile that fills in what npm's hidden lockfile lacks is the one npm read:
// npm-shrinkwrap.json over package-lock.json (lockfile.Find, as toa.Load sets Lockfile).
func TestReadPackagePrefersTheShrinkwrap(t *testing.T) {
	dir := t.TempDir()
	lock := func(integrity string) string {
		return `{"lockfileVersion":3,"packages":{"":{},"node_modules/ms":{"version":"2.1.3","resolved":"https://registry.example/ms.tgz","integrity":"` + integrity + `"}}}`
	}
	for name, data := range map[string]string{"package.json": `{"name":"a","version":"1.0.0","dependencies":{"ms":"2.1.3"}}`,
		"package-lock.json": lock("sha512-TE9DSw=="), "npm-shrinkwrap.json": lock("sha512-U0hSSU5L")} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	c := &toa.Component{Path: dir, PackageJSON: filepath.Join(dir, "package.json"), Lockfile: lockfile.Find(dir)}
	comp := &Component{Installed: &Install{Root: "composition/a", Packages: []Package{{Name: "ms", Version: "2.1.3", Path: "node_modules/ms"}}}}
	if err := readPackage(c, comp); err != nil {
		t.Fatal(err)
	}
	if got := comp.Installed.Packages[0].Integrity; got != "sha512-U0hSSU5L" {
		t.Errorf("ms's integrity %q, want the shrinkwrap's", got)
	}
}
