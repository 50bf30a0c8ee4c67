package harness

import (
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// MemoryRegistry serves go-containerregistry's in-memory registry (pkg/registry) on loopback for
// the life of the test, and returns its address "127.0.0.1:PORT". It needs nothing installed, so
// unit tests (`go test -short`) use it beside the real registry of Registry. It ignores mounts
// and does not check that a manifest's blobs are there (DESIGN.md): a test that cares reads what
// it pushed back whole.
func MemoryRegistry(t testing.TB) string {
	addr, _, _ := MemoryRegistryWithLog(t)
	return addr
}

// MemoryRegistryWithLog is MemoryRegistry with every request recorded, as RegistryWithLog
// records them, and a stop function that stops it before the test ends (a registry gone away).
func MemoryRegistryWithLog(t testing.TB) (string, *Recorder, func()) {
	t.Helper()
	reg := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	rec := &Recorder{}
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		rec.serve(reg, w, req)
	}))
	t.Cleanup(server.Close)
	return strings.TrimPrefix(server.URL, "http://"), rec, server.Close
}

// PushRandomBase pushes to ref an index of small random images, one per platform (linux/amd64
// and linux/arm64 when none are given), each with NODE_VERSION=20.0.0 in its config: a base for
// tests of the push logic, which never run it. Its images are Docker's v2 format, as
// random.Image makes them.
func PushRandomBase(t testing.TB, ref string, platforms ...string) {
	t.Helper()
	if len(platforms) == 0 {
		platforms = []string{"linux/amd64", "linux/arm64"}
	}
	var adds []mutate.IndexAddendum
	for _, p := range platforms {
		img, err := random.Image(256, 1)
		if err != nil {
			t.Fatal(err)
		}
		platform, err := v1.ParsePlatform(p)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		cfg = cfg.DeepCopy()
		cfg.OS, cfg.Architecture, cfg.Variant = platform.OS, platform.Architecture, platform.Variant
		cfg.Config.Env = []string{"NODE_VERSION=20.0.0"}
		if img, err = mutate.ConfigFile(img, cfg); err != nil {
			t.Fatal(err)
		}
		adds = append(adds, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: platform}})
	}
	idx := mutate.AppendManifests(mutate.IndexMediaType(empty.Index, types.OCIImageIndex), adds...)
	r, err := name.ParseReference(ref, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.WriteIndex(r, idx); err != nil {
		t.Fatal(err)
	}
}
