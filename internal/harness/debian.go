package harness

import (
	"io"
	"os"
	"path/filepath"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/klauspost/compress/gzip"

	"github.com/toa-deploy/toa-deploy/internal/debianbase"
)

// DebianBaseRef is where PushDebianBase pushes the Debian bases, under the registry's address.
const DebianBaseRef = "bases/debian-node:18"

// DebianNodeVersion is the Node of Debian bookworm's nodejs, in the Debian bases.
const DebianNodeVersion = debianbase.NodeVersion

// PushDebianBase pushes, as <addr>/bases/debian-node:18, an index of the bases
// testdata/bases/build.sh makes from Debian's own packages for linux/amd64 and linux/arm64
// (Debian's node 18, npm 10, python3, make, g++, a shell): real bases to run install scripts and
// build.run lines in, Node 18 being another major than the runner's. The test is skipped, saying
// what to run, where they have not been made (testdata/qemu/install.sh, which setup.sh runs).
func PushDebianBase(t testing.TB, addr string) string {
	t.Helper()
	return pushDebian(t, addr+"/"+DebianBaseRef, nil)
}

// pushDebian pushes the Debian bases as ref, each with the layers on top that more makes for its
// architecture (none where more is nil).
func pushDebian(t testing.TB, ref string, more func(arch string) []v1.Layer) string {
	t.Helper()
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, arch := range []string{"amd64", "arm64"} {
		file := debianbase.File(arch)
		if _, err := os.Stat(file); err != nil {
			t.Skipf("no Debian base for %s at %s: run bash testdata/qemu/install.sh (make setup does)", arch, file)
		}
		gz, err := gzipOnce(file)
		if err != nil {
			t.Fatalf("compress %s: %v", file, err)
		}
		l, err := tarball.LayerFromFile(gz, tarball.WithMediaType(types.OCILayer))
		if err != nil {
			t.Fatal(err)
		}
		img, err := mutate.Append(mutate.MediaType(empty.Image, types.OCIManifestSchema1), mutate.Addendum{Layer: l,
			History: v1.History{CreatedBy: "testdata/bases/build.sh " + arch + ": Debian bookworm's nodejs, npm 10, python3, make, g++"}})
		if err != nil {
			t.Fatal(err)
		}
		if more != nil {
			for _, l := range more(arch) {
				if img, err = mutate.Append(img, mutate.Addendum{Layer: l, MediaType: types.OCILayer}); err != nil {
					t.Fatal(err)
				}
			}
		}
		img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
		cfg, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		cfg = cfg.DeepCopy()
		cfg.OS, cfg.Architecture = "linux", arch
		cfg.Config.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "NODE_VERSION=" + DebianNodeVersion}
		cfg.Config.Cmd = []string{"node"}
		if img, err = mutate.ConfigFile(img, cfg); err != nil {
			t.Fatal(err)
		}
		p := v1.Platform{OS: "linux", Architecture: arch}
		if arch == "arm64" {
			p.Variant = "v8"
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &p}})
	}
	if err := remote.WriteIndex(baseRef(t, ref), idx, remote.WithContext(t.Context())); err != nil {
		t.Fatalf("push the Debian bases %s: %v", ref, err)
	}
	return ref
}

// gzipOnce compresses file next to it (file.gz, level 1), once: the push reads the blob twice.
func gzipOnce(file string) (string, error) {
	out := file + ".gz"
	if info, err := os.Stat(out); err == nil && info.Size() > 0 {
		return out, nil
	}
	in, err := os.Open(file)
	if err != nil {
		return "", err
	}
	defer in.Close()
	tmp, err := os.CreateTemp(filepath.Dir(file), ".gz-")
	if err != nil {
		return "", err
	}
	defer os.Remove(tmp.Name())
	zw, err := gzip.NewWriterLevel(tmp, gzip.BestSpeed)
	if err != nil {
		return "", err
	}
	if _, err := io.Copy(zw, in); err != nil {
		return "", err
	}
	if err := zw.Close(); err != nil {
		return "", err
	}
	if err := tmp.Close(); err != nil {
		return "", err
	}
	return out, os.Rename(tmp.Name(), out)
}
