package main

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/toa-deploy/toa-deploy/internal/harness"
	"github.com/toa-deploy/toa-deploy/layer/sandbox"
)

// TestBuildInBaseWithoutOverlay pushes the native application as a kernel that refuses overlayfs
// in a user namespace would have it built (sandbox.NoOverlayEnv: on private copies of the bases)
// and as usual, each to a registry of its own: every platform image has the same layers, the
// build.run layer and the dependencies' (scripts run in the base) among them.
func TestBuildInBaseWithoutOverlay(t *testing.T) {
	// both registries get their bases before a push sets TOA_CACHE, where the bases are found
	dirs := map[bool]string{}
	for _, noOverlay := range []bool{false, true} {
		addr := harness.Registry(t)
		harness.PushDebianBase(t, addr)
		dirs[noOverlay] = copyApp(t, "native", addr)
	}
	layersOf := func(noOverlay bool) map[string][]string {
		dir := dirs[noOverlay]
		if noOverlay {
			t.Setenv(sandbox.NoOverlayEnv, "1")
		}
		start := time.Now()
		run := pushUnread(t, dir, t.TempDir())
		t.Logf("no overlay %v: pushed in %s", noOverlay, time.Since(start))
		if noOverlay && !strings.Contains(run.stderr, "runs on a private copy of the base") {
			t.Errorf("the push does not say it ran on a copy:\n%s", run.stderr)
		}
		out := map[string][]string{}
		for _, img := range run.out.Images {
			ref, err := name.ParseReference(img.Reference, name.Insecure)
			if err != nil {
				t.Fatal(err)
			}
			idx, err := remote.Index(ref)
			if err != nil {
				t.Fatal(err)
			}
			m, err := idx.IndexManifest()
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range m.Manifests {
				image, err := idx.Image(d.Digest)
				if err != nil {
					t.Fatal(err)
				}
				layers, err := image.Layers()
				if err != nil {
					t.Fatal(err)
				}
				key := img.Name + " " + d.Platform.String()
				for _, l := range layers {
					digest, _ := l.Digest()
					out[key] = append(out[key], digest.String())
				}
			}
		}
		return out
	}
	overlay := layersOf(false)
	copied := layersOf(true)
	if len(overlay) == 0 {
		t.Fatal("no images")
	}
	for key, want := range overlay {
		if got := copied[key]; strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("%s: without an overlay the layers are\n  %s\nwith one\n  %s", key, strings.Join(got, "\n  "), strings.Join(want, "\n  "))
		}
	}
}
