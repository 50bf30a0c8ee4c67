package toa

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/toa-deploy/toa-deploy/internal/fault"
)

func TestIgnoreMatch(t *testing.T) {
	ig := Ignore{".env*", "test/**", "*.log", "docs", "**/*.pem", "{a,b}.tmp", "./local.json"}
	for rel, want := range map[string]bool{
		".env": true, ".env.production": true, "lib/.env": false, // a pattern without a slash is the folder's own
		"test/unit/a.js": true, "test": true, "tests/a.js": false,
		"debug.log": true, "lib/debug.log": false,
		"docs/readme.md": true, "docs": true, "lib/docs.js": false,
		"certs/server.pem": true, "server.pem": true,
		"a.tmp": true, "c.tmp": false, "local.json": true,
		"index.js": false, "manifest.toa.yaml": false,
	} {
		if got := ig.Match(rel); got != want {
			t.Errorf("%s: %v, want %v", rel, got, want)
		}
	}
	if (Ignore{"**"}).Match("manifest.toa.yaml") || !(Ignore{"**"}).Match("index.js") {
		t.Error("manifest.toa.yaml is left out, or ** is not everything")
	}
}

// `ignore:` is read as a list of patterns; the version leaves ignored files out, so that a change
// to one does not make a new image.
func TestComponentIgnore(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "dummies.one")
	makeComponent(t, dir)
	write(t, filepath.Join(dir, "manifest.toa.yaml"), "name: one\nignore: [.env, 'scratch/**']\n")
	write(t, filepath.Join(dir, ".env"), "TOKEN=1\n")
	c, err := loadComponent(dir)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(c.Ignore, " ") != ".env scratch/**" {
		t.Errorf("ignore %v", c.Ignore)
	}
	for _, change := range []string{".env", "scratch/notes.txt"} {
		write(t, filepath.Join(dir, change), "changed "+change)
		again, err := loadComponent(dir)
		if err != nil {
			t.Fatal(err)
		}
		if again.Version != c.Version {
			t.Errorf("a change to the ignored %s made version %s of %s", change, again.Version, c.Version)
		}
	}
	write(t, filepath.Join(dir, "index.js"), "exports.x = 2\n")
	if changed, _ := loadComponent(dir); changed.Version == c.Version {
		t.Error("a change to index.js left the version")
	}

	for manifest, want := range map[string]string{
		"name: one\nignore: '!node_modules'\n": "ignore: must be a list",
		"name: one\nignore: ['!.git']\n":       "ignore[0]: '!.git' would put back a file toa-push leaves out",
		"name: one\nignore: ['a/[b']\n":        "ignore[0]: 'a/[b' is not a pattern",
		"name: one\nignore: [.env, {a: b}]\n":  "ignore[1]",
	} {
		write(t, filepath.Join(dir, "manifest.toa.yaml"), manifest)
		_, err := loadComponent(dir)
		if !fault.IsInput(err) || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %s", manifest, err, want)
		}
	}
}
