package sandbox

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

func TestMain(m *testing.M) {
	Init()
	os.Exit(m.Run())
}

// debianBase is the base testdata/bases/build.sh made for arch, as an image of one layer.
func debianBase(t *testing.T, arch string) v1.Image {
	t.Helper()
	cache := os.Getenv("TOA_CACHE")
	if cache == "" {
		cache = filepath.Join(os.Getenv("HOME"), ".cache", "toa-deploy")
	}
	file := filepath.Join(cache, "bases", "debian-"+arch+".tar")
	if _, err := os.Stat(file); err != nil {
		t.Skipf("no Debian base for %s: run bash testdata/qemu/install.sh (make setup does)", arch)
	}
	l, err := tarball.LayerFromFile(file)
	if err != nil {
		t.Fatal(err)
	}
	img, err := mutate.AppendLayers(empty.Image, l)
	if err != nil {
		t.Fatal(err)
	}
	cfg, _ := img.ConfigFile()
	cfg = cfg.DeepCopy()
	cfg.Architecture, cfg.OS = arch, "linux"
	img, err = mutate.ConfigFile(img, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

func TestRunNodeInForeignBase(t *testing.T) {
	for _, arch := range []string{"arm64", "amd64"} {
		t.Run(arch, func(t *testing.T) {
			img := debianBase(t, arch)
			cache := t.TempDir()
			start := time.Now()
			root, err := Unpack(t.Context(), img, cache)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("unpacked in %s", time.Since(start))
			upper := filepath.Join(cache, "upper")
			os.Mkdir(upper, 0o755)
			var out bytes.Buffer
			start = time.Now()
			err = Run(context.Background(), Command{Root: root, Upper: upper, Platform: "linux/" + arch,
				Args: []string{"/bin/sh", "-c", "node -p process.arch && echo made > /etc/marker && rm /etc/debian_version && ls /proc/self/ns >/dev/null; id -u"},
				Env:  []string{"PATH=/usr/local/bin:/usr/bin:/bin"}, Stdout: &out, Stderr: &out})
			t.Logf("ran in %s: %s", time.Since(start), out.String())
			if err != nil {
				t.Fatal(err)
			}
			nodeArch := map[string]string{"arm64": "arm64", "amd64": "x64"}[arch]
			if got := strings.Fields(out.String()); len(got) < 2 || got[0] != nodeArch || got[len(got)-1] != "0" {
				t.Errorf("output %q, want %s and uid 0", out.String(), arch)
			}
			if _, err := os.Stat(filepath.Join(root, "etc", "marker")); err == nil {
				t.Error("the run wrote into the cached root")
			}
			if data, err := os.ReadFile(filepath.Join(upper, "etc", "marker")); err != nil || string(data) != "made\n" {
				t.Errorf("upper's marker: %q, %v", data, err)
			}
		})
	}
}
