package sandbox

import (
	"archive/tar"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"

	"github.com/toa-deploy/toa-deploy/internal/fsys"
)

// TestChainID: the chain ID of one layer is its diff ID, of more the digest of the one below
// and the next diff ID (image-spec); it does not depend on the config's other fields, and a
// base whose manifest and config count other layers has none.
func TestChainID(t *testing.T) {
	a := layerOf(t, "gzip", entry{name: "a", data: "a", kind: tar.TypeReg})
	b := layerOf(t, "zstd", entry{name: "b", data: "b", kind: tar.TypeReg})
	da, _ := a.DiffID()
	db, _ := b.DiffID()
	one, _ := mutate.AppendLayers(empty.Image, a)
	two, _ := mutate.AppendLayers(empty.Image, a, b)
	sum := sha256.Sum256([]byte(da.String() + " " + db.String()))
	for _, c := range []struct {
		img  v1.Image
		want string
	}{{one, da.String()}, {two, "sha256:" + hex.EncodeToString(sum[:])}} {
		if got, err := ChainID(c.img); err != nil || got.String() != c.want {
			t.Errorf("ChainID = %s, %v; want %s", got, err, c.want)
		}
	}
	cfg, _ := two.ConfigFile()
	cfg = cfg.DeepCopy()
	cfg.Config.Env = []string{"OTHER=1"}
	other, _ := mutate.ConfigFile(two, cfg)
	if x, y := must(ChainID(two)), must(ChainID(other)); x != y {
		t.Errorf("another config over the same layers: %s, %s", x, y)
	}
	if _, err := ChainID(withConfigOf(t, two, a)); err == nil || !strings.Contains(err.Error(), "its manifest lists 1 layers where its config names 2") {
		t.Errorf("ChainID of layers its config does not count: %v", err)
	}
}

func must(h v1.Hash, err error) v1.Hash {
	if err != nil {
		panic(err)
	}
	return h
}

// TestUnpackKeyedByLayers: a root is kept under the chain ID of the layers it holds, never the
// config digest. A base forged with a genuine base's config but other layers is refused whether
// it comes before the genuine one or after it (then it is given the genuine root, what its
// config names, never its own layers' files); the genuine base's root never holds the forged
// one's files, even where a toa-push of before kept the forged root under the config's digest.
func TestUnpackKeyedByLayers(t *testing.T) {
	lower := layerOf(t, "gzip", entry{name: "etc/os-release", data: "genuine", kind: tar.TypeReg})
	genuineTool := layerOf(t, "gzip", entry{name: "usr/bin/tool", data: "genuine", kind: tar.TypeReg})
	hostileTool := layerOf(t, "gzip", entry{name: "usr/bin/tool", data: "hostile", kind: tar.TypeReg}, entry{name: "etc/hostile", data: "hostile", kind: tar.TypeReg})
	genuine, err := mutate.AppendLayers(empty.Image, lower, genuineTool)
	if err != nil {
		t.Fatal(err)
	}
	hostile := withConfigOf(t, genuine, lower, hostileTool)
	config, _ := genuine.ConfigName()
	chain, _ := ChainID(genuine)

	isGenuine := func(t *testing.T, root string) {
		t.Helper()
		if data, err := os.ReadFile(filepath.Join(root, "usr", "bin", "tool")); err != nil || string(data) != "genuine" {
			t.Errorf("usr/bin/tool = %q, %v; want the genuine base's", data, err)
		}
		if _, err := os.Lstat(filepath.Join(root, "etc", "hostile")); err == nil {
			t.Error("the root holds the forged base's etc/hostile")
		}
	}
	t.Run("forged first", func(t *testing.T) {
		cache := t.TempDir()
		if _, err := Unpack(t.Context(), hostile, cache); err == nil || !strings.Contains(err.Error(), "the layer 2 of 2") {
			t.Fatalf("the forged base: %v, want the layer 2 of 2 refused", err)
		}
		root, err := Unpack(t.Context(), genuine, cache)
		if err != nil {
			t.Fatal(err)
		}
		if root != filepath.Join(cache, "roots", "sha256-"+chain.Hex, "root") {
			t.Errorf("the root %s is not keyed by the layers' chain ID %s", root, chain)
		}
		isGenuine(t, root)
	})
	t.Run("forged after", func(t *testing.T) {
		cache := t.TempDir()
		root, err := Unpack(t.Context(), genuine, cache)
		if err != nil {
			t.Fatal(err)
		}
		again, err := Unpack(t.Context(), hostile, cache)
		if err != nil || again != root {
			t.Fatalf("the forged base after the genuine one: %s, %v; want the genuine root %s", again, err, root)
		}
		isGenuine(t, root)
	})
	t.Run("forged root kept by config digest", func(t *testing.T) {
		cache := t.TempDir()
		old := filepath.Join(cache, "roots", "sha256-"+config.Hex)
		for file, data := range map[string]string{"root/usr/bin/tool": "hostile", "root/etc/hostile": "hostile", fsys.FolderSizeFile: "14"} {
			p := filepath.Join(old, file)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		root, err := Unpack(t.Context(), genuine, cache)
		if err != nil {
			t.Fatal(err)
		}
		isGenuine(t, root)
	})
}
