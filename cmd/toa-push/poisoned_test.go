package main

import (
	"archive/tar"
	"bytes"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/toa-deploy/toa-deploy/internal/harness"
)

// markerLayer is a layer holding /etc/marker with these words.
func markerLayer(t *testing.T, words string) v1.Layer {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	tw.WriteHeader(&tar.Header{Name: "etc/marker", Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(words))})
	tw.Write([]byte(words))
	tw.Close()
	data := b.Bytes()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil })
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// TestPoisonedBase: a registry holds a genuine base (the Debian base for amd64 and a layer with
// /etc/marker) and one forged to pass for it (the genuine config, its own layer with another
// /etc/marker). An application whose build.run line copies /etc/marker is pushed on the forged
// base, then on the genuine one, with one cache. The forged base is refused (exit 1, naming its
// layer, within the memory cap), and the genuine base's image holds the genuine marker. Before,
// the forged push succeeded, and the genuine one took its root and its build.run layer, both
// cached by the config's digest: its image carried the forged base's file.
func TestPoisonedBase(t *testing.T) {
	if testing.Short() {
		t.Skip("pushes on the Debian base to a real registry")
	}
	addr := harness.Registry(t)
	debianRef := harness.PushDebianBase(t, addr)
	ref, err := name.ParseReference(debianRef)
	if err != nil {
		t.Fatal(err)
	}
	debian, err := remote.Image(ref, remote.WithPlatform(v1.Platform{OS: "linux", Architecture: "amd64"}), remote.WithContext(t.Context()))
	if err != nil {
		t.Fatal(err)
	}
	genuine, err := mutate.AppendLayers(debian, markerLayer(t, "genuine"))
	if err != nil {
		t.Fatal(err)
	}
	hostile, err := mutate.AppendLayers(debian, markerLayer(t, "hostile"))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := genuine.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if hostile, err = mutate.ConfigFile(hostile, cfg); err != nil {
		t.Fatal(err)
	}
	bases := map[string]v1.Image{"genuine": genuine, "hostile": hostile}
	for tag, img := range bases {
		r, _ := name.ParseReference(ref.Context().String() + ":" + tag)
		if err := remote.Write(r, img, remote.WithContext(t.Context())); err != nil {
			t.Fatal(err)
		}
	}
	base := func(tag string) string { return ref.Context().String() + ":" + tag }
	run := "cp /etc/marker /usr/local/seen"
	cache := t.TempDir()

	dir := hostileApp(t, base("hostile"), addr, run)
	code, stderr, took, _ := runCapped(t, dir, []string{"TOA_CACHE=" + cache}, "--path", dir, "-k", filepath.Join(dir, "deployment"), "--timeout", "90s")
	t.Logf("the forged base: exit %d in %s:\n%s", code, took.Round(time.Millisecond), stderr)
	if code != 1 {
		t.Errorf("exit %d, want 1", code)
	}
	for _, w := range []string{"the layer 2 of 2 (sha256:", "rootfs.diff_ids", "forged to pass for another base", "push this one again from its source"} {
		if !strings.Contains(stderr, w) {
			t.Errorf("the error does not say %q", w)
		}
	}
	if took > time.Minute {
		t.Errorf("the refusal took %s", took)
	}

	dir = hostileApp(t, base("genuine"), addr, run)
	out := pushUnread(t, dir, cache).out
	if len(out.Images) != 1 {
		t.Fatalf("images: %+v", out.Images)
	}
	pushedRef, err := name.ParseReference(out.Images[0].Reference)
	if err != nil {
		t.Fatal(err)
	}
	img, err := remote.Image(pushedRef, remote.WithPlatform(v1.Platform{OS: "linux", Architecture: "amd64"}), remote.WithContext(t.Context()))
	if err != nil {
		t.Fatal(err)
	}
	if seen := fileOf(t, img, debian, "usr/local/seen"); seen != "genuine" {
		t.Errorf("the genuine base's image has /usr/local/seen %q, want \"genuine\"", seen)
	}
}

// fileOf is the content of the file at name in img's layers above those of base, "" when none
// has it.
func fileOf(t *testing.T, img, base v1.Image, file string) string {
	t.Helper()
	below := map[v1.Hash]bool{}
	baseLayers, _ := base.Layers()
	for _, l := range baseLayers {
		d, _ := l.Digest()
		below[d] = true
	}
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	found := ""
	for _, l := range layers {
		if d, _ := l.Digest(); below[d] {
			continue
		}
		rc, err := l.Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		tr := tar.NewReader(rc)
		for {
			h, err := tr.Next()
			if err != nil {
				break
			}
			if strings.TrimPrefix(h.Name, "./") == file {
				data, _ := io.ReadAll(tr)
				found = string(data)
			}
		}
		rc.Close()
	}
	return found
}
