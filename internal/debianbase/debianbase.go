// Package debianbase gives tests the Debian bases testdata/bases/build.sh makes from Debian's own
// packages (bookworm's node 18, npm 10, python3, make, g++, a shell), read from the cache. It
// imports only go-containerregistry and the standard library, so that the tests of sandbox and
// layer, which internal/harness imports, can use it without an import cycle.
package debianbase

import (
	"os"
	"path/filepath"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// NodeVersion is the Node of Debian bookworm's nodejs, in the bases.
const NodeVersion = "18.20.4"

// Dir is the folder of the bases: $TOA_CACHE/bases, ~/.cache/toa-deploy/bases by default.
func Dir() string {
	cache := os.Getenv("TOA_CACHE")
	if cache == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			home = os.TempDir()
		}
		cache = filepath.Join(home, ".cache", "toa-deploy")
	}
	return filepath.Join(cache, "bases")
}

// File is the tar of arch's base (amd64, arm64), uncompressed.
func File(arch string) string { return filepath.Join(Dir(), "debian-"+arch+".tar") }

// Image is arch's base as an image of one layer, for linux/arch, with Debian's PATH and
// NODE_VERSION. The test is skipped, saying what to run, where the base has not been made.
func Image(t testing.TB, arch string) v1.Image {
	t.Helper()
	file := File(arch)
	if _, err := os.Stat(file); err != nil {
		t.Skipf("no Debian base for %s at %s: run bash testdata/qemu/install.sh (make setup does)", arch, file)
	}
	l, err := tarball.LayerFromFile(file)
	if err != nil {
		t.Fatalf("read the Debian base %s: %v", file, err)
	}
	img, err := mutate.AppendLayers(empty.Image, l)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cfg = cfg.DeepCopy()
	cfg.Architecture, cfg.OS = arch, "linux"
	cfg.Config.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "NODE_VERSION=" + NodeVersion}
	if img, err = mutate.ConfigFile(img, cfg); err != nil {
		t.Fatal(err)
	}
	return img
}
