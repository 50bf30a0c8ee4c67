package layer

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toa-deploy/toa-deploy/internal/app/toa"
)

// The manifest's `ignore` leaves files and folders out of the sources; files that usually hold
// secrets and go in are named by Secrets, with the manifest to list them in, and the ones left
// out are not.
func TestSourcesIgnoreAndSecrets(t *testing.T) {
	root := filepath.Join(t.TempDir(), "one")
	for name, content := range map[string]string{
		"manifest.toa.yaml":    "name: one\n",
		"index.js":             "exports.x = 1\n",
		".env":                 "TOKEN=secret\n",
		".env.example":         "TOKEN=\n",
		"certs/server.key":     "-----BEGIN PRIVATE KEY-----\n",
		"scratch/notes.txt":    "mine\n",
		"scratch/deep/a.txt":   "mine\n",
		"lib/debug.log":        "log\n",
		"lib/config/.env.prod": "TOKEN=prod\n",
	} {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	c := component(t, root, "one")
	c.Manifest = filepath.Join(root, "manifest.toa.yaml")
	layerOf := func(ignore toa.Ignore) ([]entry, string) {
		t.Helper()
		c.Ignore = ignore
		l, err := Sources(c, WithCacheDir(t.TempDir()))
		if err != nil {
			t.Fatal(err)
		}
		warned, err := Secrets(c)
		if err != nil {
			t.Fatal(err)
		}
		return entries(t, l), warned
	}
	const base = "composition/dummies-one/"

	list, warned := layerOf(nil)
	for _, name := range []string{".env", "certs/server.key", "lib/config/.env.prod", ".env.example", "scratch/notes.txt"} {
		if find(list, base+name) == nil {
			t.Errorf("%s is not in the layer", name)
		}
	}
	if !strings.Contains(warned, "dummies.one: .env, certs/server.key, lib/config/.env.prod are in its sources and go into its image") ||
		!strings.Contains(warned, "`ignore:` in "+filepath.Join(root, "manifest.toa.yaml")) || strings.Contains(warned, ".env.example") {
		t.Errorf("warnings:\n%s", warned)
	}

	list, warned = layerOf(toa.Ignore{".env*", "**/*.key", "scratch", "lib/**/*.log", "lib/config/.env.*"})
	for _, name := range []string{".env", ".env.example", "certs/server.key", "scratch/", "scratch/notes.txt", "scratch/deep/a.txt", "lib/debug.log", "lib/config/.env.prod"} {
		if find(list, base+name) != nil {
			t.Errorf("%s is in the layer", name)
		}
	}
	for _, name := range []string{"index.js", "manifest.toa.yaml", "certs/", "lib/config/"} {
		if find(list, base+name) == nil {
			t.Errorf("%s is not in the layer", name)
		}
	}
	if warned != "" {
		t.Errorf("warnings for files left out:\n%s", warned)
	}
}

// A cached layer whose bytes are no longer its digest (a flipped byte on the disk) is not used:
// it is removed and made again, with a warning that names the cache.
func TestDamagedCachedLayerIsMadeAgain(t *testing.T) {
	cache := t.TempDir()
	warnings := &collect{}
	files := []File{{Name: "a/b.txt", Data: []byte("the cached layer\n")}}
	first, err := Files(files, WithCacheDir(cache), WithWarnings(warnings.warn))
	if err != nil {
		t.Fatal(err)
	}
	d, _ := first.Digest()
	blob := filepath.Join(cache, "layers", "sha256", d.Hex+".tar.gz")
	data, err := os.ReadFile(blob)
	if err != nil {
		t.Fatal(err)
	}
	data[len(data)/2] ^= 0xff
	if err := os.WriteFile(blob, data, 0o644); err != nil {
		t.Fatal(err)
	}
	again, err := Files(files, WithCacheDir(cache), WithWarnings(warnings.warn))
	if err != nil {
		t.Fatal(err)
	}
	if digest(t, again) != d.String() {
		t.Errorf("made again as %s, was %s", digest(t, again), d)
	}
	entries(t, again) // its bytes are its digest again
	if w := warnings.String(); !strings.Contains(w, "the cache "+filepath.Join(cache, "layers")+" held a damaged layer") {
		t.Errorf("warnings: %q", w)
	}
}
