package layer

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/toa-deploy/toa-deploy/internal/app/lockfile"
	"github.com/toa-deploy/toa-deploy/internal/app/toa"
	"github.com/toa-deploy/toa-deploy/internal/fault"
)

var (
	amd64 = Platform{OS: "linux", Architecture: "amd64", Libc: "glibc"}
	arm64 = Platform{OS: "linux", Architecture: "arm64", Libc: "glibc"}
)

// npmCache is shared by the tests that run npm, and kept between runs, so that only the first
// run downloads.
var npmCache = WithNpmCache(filepath.Join(os.TempDir(), "toa-deploy-layer-tests-npm"))

// npmTest skips a test that runs npm when -short says so, or when this runner is not the
// linux/x64 glibc the tests expect as their own platform.
func npmTest(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("runs npm against the npm registry")
	}
	r, err := DetectRunner(context.Background())
	if err != nil {
		t.Skip(err)
	}
	if r.OS != "linux" || r.CPU != "x64" || r.Libc != "glibc" {
		t.Skipf("the tests take linux/x64 glibc as the runner's platform, not %s", r)
	}
}

// withoutNpm runs f with neither npm nor node on PATH: an install that would run npm fails, one
// served from the cache does not. The runner is given, as a push gives it (WithRunner).
func withoutNpm(t *testing.T, f func(runner Option)) {
	t.Helper()
	r, err := DetectRunner(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	path := os.Getenv("PATH")
	t.Setenv("PATH", path) // restored at the end, whatever happens
	os.Setenv("PATH", t.TempDir())
	defer os.Setenv("PATH", path)
	f(WithRunner(r))
}

// fixture is a component of testdata/components.
func fixture(t *testing.T, name string) *toa.Component {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("testdata", "components", name))
	if err != nil {
		t.Fatal(err)
	}
	c := &toa.Component{Path: dir, Name: name, Namespace: "default", Locator: toa.NewLocator(name, "default"), ModuleType: "commonjs"}
	if fileExists(filepath.Join(dir, "package.json")) {
		c.PackageJSON = filepath.Join(dir, "package.json")
	}
	c.Lockfile = lockfile.Find(dir)
	return c
}

// collect gathers warnings.
type collect struct {
	sync.Mutex
	list []string
}

func (c *collect) warn(s string) { c.Lock(); c.list = append(c.list, s); c.Unlock() }

func (c *collect) String() string { c.Lock(); defer c.Unlock(); return strings.Join(c.list, "\n") }

func TestDependenciesOfPlatforms(t *testing.T) {
	npmTest(t)
	t.Parallel()
	for _, c := range []struct {
		component string
		platform  Platform
		present   []string // under composition/default-<component>/node_modules/
		absent    []string
	}{
		{"plain", amd64, []string{"is-number/package.json", "toa-test-local/index.js"}, []string{"is-odd/", ".npmrc"}},
		{"plain", arm64, []string{"is-number/package.json", "toa-test-local/index.js"}, []string{"is-odd/", ".npmrc"}},
		{"esbuild", amd64, []string{"esbuild/package.json", "@esbuild/linux-x64/package.json", ".bin/esbuild"}, []string{"@esbuild/linux-arm64/"}},
		{"esbuild", arm64, []string{"esbuild/package.json", "@esbuild/linux-arm64/bin/esbuild"}, []string{"@esbuild/linux-x64/"}},
	} {
		t.Run(c.component+" "+c.platform.Architecture, func(t *testing.T) {
			t.Parallel()
			warnings := &collect{}
			start := time.Now()
			l, err := Dependencies(context.Background(), fixture(t, c.component), c.platform,
				WithCacheDir(t.TempDir()), npmCache, WithWarnings(warnings.warn))
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("installed in %v", time.Since(start).Round(time.Millisecond))
			list := entries(t, l)
			base := "composition/default-" + c.component + "/node_modules/"
			for _, p := range c.present {
				if find(list, base+p) == nil {
					t.Errorf("%s is not in the layer", p)
				}
			}
			for _, p := range c.absent {
				if find(list, base+p) != nil {
					t.Errorf("%s is in the layer", p)
				}
			}
			for _, e := range list {
				if !strings.HasPrefix(base, e.Name) && !strings.HasPrefix(e.Name, base) {
					t.Errorf("%s is not under %s", e.Name, base)
				}
				if filepath.Base(e.Name) == ".npmrc" {
					t.Errorf("%s is in the layer", e.Name)
				}
			}
			// file: dependencies are copies, not links out of the image
			if e := find(list, base+"toa-test-local"); e != nil && e.Typeflag == tar.TypeSymlink {
				t.Errorf("toa-test-local is a link to %s", e.Linkname)
			}
			// without a base the install scripts run nowhere (never on the runner): esbuild's
			// postinstall did not put its binary in esbuild/bin, npm's shim is there, and a warning
			// says so (TestKeptTreeLeftWhenAScriptedPackageGoes sees the postinstall in the base)
			if c.component == "esbuild" && c.platform == amd64 {
				shim := find(list, base+"esbuild/bin/esbuild")
				if shim == nil || shim.Typeflag != tar.TypeReg || !strings.HasPrefix(shim.data, "#!/usr/bin/env node") {
					t.Errorf("esbuild/bin/esbuild: %s, want npm's shim", entryString(shim))
				}
				if !strings.Contains(warnings.String(), "esbuild") {
					t.Errorf("no warning named esbuild, whose postinstall did not run: %s", warnings.String())
				}
			}
		})
	}
}

// TestDependenciesAreCached is not parallel: it takes npm off PATH for a while.
func TestDependenciesAreCached(t *testing.T) {
	npmTest(t)
	cache := WithCacheDir(t.TempDir())
	c := fixture(t, "plain")
	start := time.Now()
	first, err := Dependencies(context.Background(), c, arm64, cache, npmCache)
	if err != nil {
		t.Fatal(err)
	}
	cold := time.Since(start)
	var second v1.Layer
	var warm time.Duration
	withoutNpm(t, func(runner Option) {
		start = time.Now()
		second, err = Dependencies(context.Background(), c, arm64, cache, npmCache, runner)
		warm = time.Since(start)
	})
	if err != nil {
		t.Fatalf("npm ran again for the same component: %v", err)
	}
	t.Logf("first install %v, then from the cache %v", cold.Round(time.Millisecond), warm.Round(time.Millisecond))
	if digest(t, first) != digest(t, second) {
		t.Errorf("the cached layer is another blob")
	}

	// another install of the same inputs, with no cache, makes the same bytes
	third, err := Dependencies(context.Background(), c, arm64, WithCacheDir(t.TempDir()), npmCache)
	if err != nil {
		t.Fatal(err)
	}
	if digest(t, first) != digest(t, third) {
		t.Errorf("two installs of the same component made %s and %s", digest(t, first), digest(t, third))
	}

	// another platform, or another base Node, is another key
	for _, opt := range []Option{WithBaseNode("v22.1.0"), WithRegistry("https://registry.npmjs.org/", "")} {
		withoutNpm(t, func(runner Option) {
			_, err = Dependencies(context.Background(), c, arm64, cache, npmCache, opt, runner)
		})
		if err == nil || !strings.Contains(err.Error(), "npm is not on PATH") {
			t.Errorf("an option of the key did not run npm: %v", err)
		}
		other, err := Dependencies(context.Background(), c, arm64, cache, npmCache, opt)
		if err != nil {
			t.Fatal(err)
		}
		if digest(t, other) != digest(t, first) {
			t.Error("the same packages made another layer")
		}
	}
}

func TestDependenciesWithoutAny(t *testing.T) {
	for _, name := range []string{"nodeps", "nothing"} {
		c := fixture(t, name)
		l, err := Dependencies(context.Background(), c, arm64, WithCacheDir(t.TempDir()))
		if l != nil || err != nil {
			t.Errorf("%s: %v, %v", name, l, err)
		}
	}
}

func TestDependenciesRefuseNativeCode(t *testing.T) {
	npmTest(t)
	t.Parallel()
	for _, c := range []struct {
		name     string
		platform Platform
		opts     []Option
		says     string
	}{
		{"for arm64", arm64, nil, "linux/arm64 (glibc)"},
		{"for musl", Platform{OS: "linux", Architecture: "amd64", Libc: "musl"}, nil, "linux/amd64 (musl)"},
		{"for another Node", amd64, []Option{WithBaseNode("v18.20.0")}, "Node 18"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			opts := append([]Option{WithCacheDir(t.TempDir()), npmCache}, c.opts...)
			_, err := Dependencies(context.Background(), fixture(t, "native"), c.platform, opts...)
			if !errors.Is(err, ErrNativeCode) || !fault.IsInput(err) {
				t.Fatalf("not refused as native code: %v", err)
			}
			for _, s := range []string{"toa-test-native@1.0.0", "binding.gyp", c.says, "registry.platforms"} {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("the error does not say %q:\n%s", s, err)
				}
			}
			if strings.Contains(err.Error(), "is-number") {
				t.Errorf("a plain package is named:\n%s", err)
			}
		})
	}
}

func TestDependenciesLockfileOutOfSync(t *testing.T) {
	npmTest(t)
	t.Parallel()
	c := fixture(t, "outofsync")
	_, err := Dependencies(context.Background(), c, amd64, WithCacheDir(t.TempDir()), npmCache)
	if !errors.Is(err, ErrLockfileOutOfSync) || !fault.IsInput(err) {
		t.Fatalf("not refused as out of sync: %v", err)
	}
	for _, s := range []string{"package-lock.json", "out of sync", "Missing: is-odd@3.0.1", "run `npm install` in " + c.Path, "commit package-lock.json"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("the error does not say %q:\n%s", s, err)
		}
	}
}

func TestDependenciesWithoutLockfile(t *testing.T) {
	npmTest(t)
	t.Parallel()
	warnings := &collect{}
	l, err := Dependencies(context.Background(), fixture(t, "nolock"), arm64, WithCacheDir(t.TempDir()), npmCache,
		WithWarnings(warnings.warn), WithArguments("TOA_LAYER_TEST_UNSET"))
	if err != nil {
		t.Fatal(err)
	}
	if find(entries(t, l), "composition/default-nolock/node_modules/is-number/package.json") == nil {
		t.Error("is-number is not installed")
	}
	for _, s := range []string{"no package-lock.json", "not reproducible", "TOA_LAYER_TEST_UNSET"} {
		if !strings.Contains(warnings.String(), s) {
			t.Errorf("the warnings do not say %q:\n%s", s, warnings)
		}
	}
	if _, err := os.Stat(filepath.Join(fixture(t, "nolock").Path, "package-lock.json")); err == nil {
		t.Error("npm wrote a lockfile into the component")
	}
}

// TestDependenciesReadNpmrc shows which configuration npm reads: a registry that refuses
// connections, given each way, fails the install (with a cache of its own, so that npm has to
// ask the registry).
func TestDependenciesReadNpmrc(t *testing.T) {
	npmTest(t)
	t.Parallel()
	const dead = "http://127.0.0.1:9/"
	for _, c := range []struct {
		name string
		opts func(t *testing.T, c *toa.Component) []Option
	}{
		{"the component's .npmrc", func(t *testing.T, c *toa.Component) []Option {
			os.WriteFile(filepath.Join(c.Path, ".npmrc"), []byte("registry="+dead+"\nfetch-retries=0\n"), 0o644)
			return nil
		}},
		{"the context's .npmrc", func(t *testing.T, c *toa.Component) []Option {
			ctx := filepath.Dir(c.Path)
			os.WriteFile(filepath.Join(ctx, ".npmrc"), []byte("registry="+dead+"\nfetch-retries=0\n"), 0o644)
			return []Option{WithContextRoot(ctx)}
		}},
		{"runtime.registry", func(t *testing.T, c *toa.Component) []Option {
			return []Option{WithRegistry(dead, ""), WithNpmConfig(map[string]string{"fetch-retries": "0"})}
		}},
		{"npm config set", func(t *testing.T, c *toa.Component) []Option {
			return []Option{WithNpmConfig(map[string]string{"registry": dead, "fetch-retries": "0"})}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			dir := filepath.Join(t.TempDir(), "context", "nolock")
			os.MkdirAll(dir, 0o755)
			data, _ := os.ReadFile(filepath.Join("testdata", "components", "nolock", "package.json"))
			os.WriteFile(filepath.Join(dir, "package.json"), data, 0o644)
			comp := &toa.Component{Path: dir, Locator: toa.NewLocator("nolock", "default"), PackageJSON: filepath.Join(dir, "package.json")}
			opts := append([]Option{WithCacheDir(t.TempDir()), WithNpmCache(t.TempDir())}, c.opts(t, comp)...)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			_, err := Dependencies(ctx, comp, amd64, opts...)
			if err == nil || !strings.Contains(err.Error(), "127.0.0.1:9") {
				t.Errorf("npm did not use the registry of %s: %v", c.name, err)
			}
		})
	}
}

func TestPlatforms(t *testing.T) {
	for _, c := range []struct {
		in, libc string
		cpu      string
		bad      bool
	}{
		{"linux/amd64", "glibc", "x64", false},
		{"linux/arm64", "musl", "arm64", false},
		{"linux/arm/v7", "glibc", "arm", false},
		{"windows/amd64", "glibc", "", true},
		{"linux/sparc", "glibc", "", true},
	} {
		p, err := ParsePlatform(c.in, c.libc)
		if err != nil {
			t.Fatal(err)
		}
		cpu, err := p.npm()
		if c.bad != (err != nil) || cpu != c.cpu {
			t.Errorf("%s: %q, %v", c.in, cpu, err)
		}
		if c.bad && !fault.IsInput(err) {
			t.Errorf("%s: not bad input: %v", c.in, err)
		}
	}
	if p, _ := ParsePlatform("linux/arm/v7", "musl"); p.String() != "linux/arm/v7 (musl)" || p.Variant != "v7" {
		t.Errorf("%+v", p)
	}
	if _, err := ParsePlatform("linux", "glibc"); err == nil {
		t.Error("linux is a platform")
	}
}

// entryString says what a layer's entry is without its bytes.
func entryString(e *entry) string {
	if e == nil {
		return "absent"
	}
	return fmt.Sprintf("%s (type %c, link %q, %d bytes)", e.Name, e.Typeflag, e.Linkname, e.Size)
}
