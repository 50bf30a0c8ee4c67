package lockfile

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
)

func write(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// npm reads npm-shrinkwrap.json over package-lock.json (npm docs, npm-shrinkwrap-json).
func TestFind(t *testing.T) {
	for _, c := range []struct {
		name  string
		files []string
		want  string
	}{
		{"none", nil, ""},
		{"package-lock.json", []string{PackageLock}, PackageLock},
		{"npm-shrinkwrap.json", []string{Shrinkwrap}, Shrinkwrap},
		{"both: the shrinkwrap", []string{PackageLock, Shrinkwrap}, Shrinkwrap},
		{"a hidden lockfile is not the project's", []string{Hidden}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			for _, f := range c.files {
				write(t, dir, map[string]string{f: "{}"})
			}
			want := ""
			if c.want != "" {
				want = filepath.Join(dir, c.want)
			}
			if got := Find(dir); got != want {
				t.Errorf("Find = %q, want %q", got, want)
			}
		})
	}
}

const lock = `{"name":"x","lockfileVersion":3,"requires":true,"packages":{
  "":{"name":"x","dependencies":{"debug":"4.3.7"}},
  "node_modules/debug":{"version":"4.3.7","resolved":"https://registry.example/debug/-/debug-4.3.7.tgz",
    "integrity":"sha512-a","license":"MIT","dependencies":{"ms":"^2.1.3"},"peerDependencies":{"p":"1"}},
  "node_modules/debug/node_modules/ms":{"version":"2.1.3","license":{"type":"MIT","url":"x"},"optional":true},
  "node_modules/@s/b":{"version":"1.0.0","license":["MIT"],"dev":true,"hasInstallScript":true},
  "node_modules/alias":{"name":"real","version":"1.0.0","devOptional":true,"optionalDependencies":{"o":"1"}},
  "node_modules/w":{"resolved":"packages/w","link":true},
  "packages/w":{"name":"w","version":"0.1.0"},
  "vendor/t":{"version":"1.0.0"},
  "node_modules/tar":{"version":"1.0.0","resolved":"file:vendor/t-1.0.0.tgz"},
  "node_modules/g":{"version":"1.0.0","resolved":"git+ssh://git@example/g.git#abc"}
}}`

func TestParse(t *testing.T) {
	pkgs, err := Parse([]byte(lock))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := pkgs[""]; ok {
		t.Error("the root's entry is among the packages")
	}
	want := Package{Path: "node_modules/debug", Version: "4.3.7", Resolved: "https://registry.example/debug/-/debug-4.3.7.tgz",
		Integrity: "sha512-a", License: "MIT", Dependencies: map[string]string{"ms": "^2.1.3"}, PeerDependencies: map[string]string{"p": "1"}}
	if got := pkgs["node_modules/debug"]; !reflect.DeepEqual(got, want) {
		t.Errorf("debug: %+v\nwant %+v", got, want)
	}
	for _, c := range []struct {
		path, name     string
		license        License
		dev, opt, devo bool
		scripts        bool
		installed      bool
		local, git     bool
	}{
		{"node_modules/debug/node_modules/ms", "ms", "MIT", false, true, false, false, true, false, false},
		{"node_modules/@s/b", "@s/b", "", true, false, false, true, true, false, false},
		{"node_modules/alias", "real", "", false, false, true, false, true, false, false},
		{"node_modules/w", "w", "", false, false, false, false, true, true, false},
		{"packages/w", "w", "", false, false, false, false, false, true, false},
		{"vendor/t", "t", "", false, false, false, false, false, true, false},
		{"node_modules/tar", "tar", "", false, false, false, false, true, true, false},
		{"node_modules/g", "g", "", false, false, false, false, true, false, true},
	} {
		p, ok := pkgs[c.path]
		if !ok {
			t.Errorf("%s is missing", c.path)
			continue
		}
		if p.Path != c.path || p.PackageName() != c.name || p.License != c.license || p.Dev != c.dev || p.Optional != c.opt ||
			p.DevOptional != c.devo || p.HasInstallScript != c.scripts || p.Installed() != c.installed || p.Local() != c.local || p.FromGit() != c.git {
			t.Errorf("%s: %+v (name %q, installed %v, local %v, git %v), want %+v", c.path, p, p.PackageName(), p.Installed(), p.Local(), p.FromGit(), c)
		}
	}
	var paths []string
	for _, p := range pkgs.Sorted() {
		paths = append(paths, p.Path)
	}
	if want := []string{"node_modules/@s/b", "node_modules/alias", "node_modules/debug", "node_modules/debug/node_modules/ms",
		"node_modules/g", "node_modules/tar", "node_modules/w", "packages/w", "vendor/t"}; !reflect.DeepEqual(paths, want) {
		t.Errorf("sorted %v, want %v", paths, want)
	}
}

func TestParseRefuses(t *testing.T) {
	for _, c := range []struct{ name, data, want string }{
		{"npm 6's lockfile", `{"lockfileVersion":1,"dependencies":{}}`, "lockfileVersion 1 has no \"packages\""},
		{"not JSON", `{"packages":`, "unexpected end of JSON input"},
		{"packages of another shape", `{"lockfileVersion":3,"packages":[]}`, "cannot unmarshal array"},
		{"a version of another type", `{"lockfileVersion":3,"packages":{"node_modules/a":{"version":1}}}`, "cannot unmarshal number"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse([]byte(c.data))
			if !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("Parse: %v, want ErrFormat saying %q", err, c.want)
			}
		})
	}
	// an empty project's lockfile has packages: none but its root
	pkgs, err := Parse([]byte(`{"lockfileVersion":3,"packages":{"":{"name":"x"}}}`))
	if err != nil || pkgs == nil || len(pkgs) != 0 {
		t.Errorf("an empty project's lockfile: %v, %v", pkgs, err)
	}
}

func TestSameInstall(t *testing.T) {
	a := Package{Version: "1.0.0", Resolved: "r", Integrity: "i", Dev: true, License: "MIT"}
	same := a
	same.Dev, same.License, same.Path = false, "", "node_modules/a"
	if !a.SameInstall(same) {
		t.Error("what npm does not install by differs")
	}
	for _, change := range []func(*Package){
		func(p *Package) { p.Version = "1.0.1" }, func(p *Package) { p.Resolved = "s" },
		func(p *Package) { p.Integrity = "j" }, func(p *Package) { p.Link = true },
	} {
		o := a
		change(&o)
		if a.SameInstall(o) {
			t.Errorf("%+v and %+v install the same", a, o)
		}
	}
}

// Read names the file in every error; a FIFO or a file over the bound is refused, not read.
func TestRead(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, map[string]string{PackageLock: lock, "bad.json": `{"lockfileVersion":1}`})
	if pkgs, err := Read(filepath.Join(dir, PackageLock)); err != nil || len(pkgs) != 9 {
		t.Errorf("Read: %d packages, %v", len(pkgs), err)
	}
	bad := filepath.Join(dir, "bad.json")
	if _, err := Read(bad); !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), bad) {
		t.Errorf("Read of npm 6's lockfile: %v", err)
	}
	fifo := filepath.Join(dir, Shrinkwrap)
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Read(fifo); err == nil || errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), "named pipe") {
		t.Errorf("Read of a FIFO: %v", err)
	}
	large := filepath.Join(dir, "large.json")
	if err := os.WriteFile(large, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(large, MaxSize+1); err != nil {
		t.Fatal(err)
	}
	if _, err := Read(large); err == nil || errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), large) {
		t.Errorf("Read of a file over the bound: %v", err)
	}
	if _, err := Read(filepath.Join(dir, "none.json")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Read of no file: %v", err)
	}
}

func TestDecode(t *testing.T) {
	if pkgs, err := Decode(strings.NewReader(lock)); err != nil || len(pkgs) != 9 {
		t.Errorf("Decode: %d packages, %v", len(pkgs), err)
	}
	// a stream over the bound is refused at the bound, not read to its end
	over := &countingReader{r: bytes.NewReader(make([]byte, MaxSize+1<<20))}
	if _, err := Decode(over); err == nil || !strings.Contains(err.Error(), "more than 64 MiB") {
		t.Errorf("Decode of a stream over the bound: %v", err)
	}
	if over.n > MaxSize+1 {
		t.Errorf("read %d bytes of a stream over the bound of %d", over.n, MaxSize)
	}
}

type countingReader struct {
	r *bytes.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}
