package image

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/toa-deploy/toa-deploy/internal/harness"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/toa-deploy/toa-deploy/internal/app/toa"
	"github.com/toa-deploy/toa-deploy/internal/registry"
	"github.com/toa-deploy/toa-deploy/layer"
)

func TestMirrorRedirect(t *testing.T) {
	mirrors, err := registry.ParseMirrors("ghcr.io=mirror.internal:5000/ghcr", "docker.io=hub.internal/dockerhub",
		"ghcr.io/toa-io=toa.internal", "localhost:5000/bases=127.0.0.1:6000/copies")
	if err != nil {
		t.Fatal(err)
	}
	for ref, want := range map[string]string{
		"ghcr.io/toa-io/runtime:1.0.0-alpha.289": "toa.internal/runtime:1.0.0-alpha.289", // the longest FROM wins
		"ghcr.io/other/image:2":                  "mirror.internal:5000/ghcr/other/image:2",
		"node:20":                                "hub.internal/dockerhub/library/node:20",
		"docker.io/library/node:20-alpine":       "hub.internal/dockerhub/library/node:20-alpine",
		"localhost:5000/bases/node:test":         "127.0.0.1:6000/copies/node:test",
		"localhost:5000/basement/node:test":      "localhost:5000/basement/node:test", // a path prefix matches whole parts
		"quay.io/x/y:1":                          "quay.io/x/y:1",
		"ghcr.io/toa-io/runtime@sha256:" + hex64: "toa.internal/runtime@sha256:" + hex64,
	} {
		got, m, err := mirrors.Redirect(ref)
		if err != nil {
			t.Errorf("%s: %v", ref, err)
			continue
		}
		if got != want {
			t.Errorf("%s is read from %s, want %s", ref, got, want)
		}
		if (m == nil) != (got == ref) {
			t.Errorf("%s: mirror %v", ref, m)
		}
	}
}

const hex64 = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

func TestMirrorSpecs(t *testing.T) {
	// a later FROM replaces an earlier one: --mirror overrides TOA_MIRRORS
	m, err := registry.ParseMirrors("ghcr.io=a.internal", "", " ghcr.io/ = b.internal/x/ ")
	if err != nil || len(m) != 1 || m[0].To != "b.internal/x" {
		t.Fatalf("%v %v", m, err)
	}
	for _, bad := range []string{"ghcr.io", "=x.internal", "ghcr.io=", "toa-io/runtime=x.internal", "ghcr.io=mirror/path", "ghcr.io=x.internal/UPPER"} {
		if _, err := registry.ParseMirrors(bad); err == nil {
			t.Errorf("%q was taken", bad)
		}
	}
	// a whole repository mirrored to a bare host leaves no repository
	m, _ = registry.ParseMirrors("ghcr.io/toa-io/runtime=mirror.internal")
	if _, _, err := m.Redirect("ghcr.io/toa-io/runtime:1"); err == nil || !strings.Contains(err.Error(), "names no repository") {
		t.Errorf("%v", err)
	}
}

// The same base, read from where the context names it and from a mirror, gives the same tags;
// the mirrored build never asks the registry the context names, and records the mirror in the
// annotations of its indexes and manifests.
func TestMirroredAndDirectGiveTheSameTags(t *testing.T) { testMirrored(t, real) }

func TestMirroredAndDirectOnTheMemoryRegistry(t *testing.T) { testMirrored(t, memory) }

func testMirrored(t *testing.T, r registries) {
	origin, originLog := r.withLog(t)
	mirror := r.registry(t)
	base := r.base(t, origin)
	copied := mirror + "/copies/" + strings.SplitN(base, "/", 2)[1]
	copyBase(t, base, copied)
	dir := harness.TwoCompositions(t, r.registry(t), base)
	app, err := toa.Load(dir, "default")
	if err != nil {
		t.Fatal(err)
	}
	tools := layer.Toolchain{Node: "20", Npm: "11"}
	plan := func(reg *registry.Registries) *Plan {
		resolved := ResolveBase(context.Background(), reg, base)
		if resolved.Err != nil {
			t.Fatal(resolved.Err)
		}
		p, err := NewPlan(app, PlanOptions{Toolchain: tools, Bases: map[string]*Base{base: resolved}})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	direct, _ := registry.NewRegistries()
	mirrors, err := registry.ParseMirrors(origin + "=" + mirror + "/copies")
	if err != nil {
		t.Fatal(err)
	}
	mirrored, _ := registry.NewRegistries(registry.WithMirrors(mirrors))
	want := plan(direct)

	originLog.Reset()
	got := plan(mirrored)
	for i := range want.images {
		if got.images[i].Tag != want.images[i].Tag || got.images[i].DepsTag != want.images[i].DepsTag {
			t.Errorf("%s: %s %s through the mirror, %s %s without", want.images[i].Name, got.images[i].Tag, got.images[i].DepsTag,
				want.images[i].Tag, want.images[i].DepsTag)
		}
		if got.images[i].BaseSource != copied || got.images[i].Mirror == "" {
			t.Errorf("%s: read from %s (%s)", got.images[i].Name, got.images[i].BaseSource, got.images[i].Mirror)
		}
	}
	result, err := Push(context.Background(), app, got, PushOptions{Registries: mirrored, Layers: fakeLayers{}, CacheDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(originLog.Requests()); n != 0 {
		t.Errorf("the registry the context names was asked %d times: %+v", n, originLog.Requests())
	}
	idx, m := harness.ReadIndex(t, result.Images[0].Reference())
	if m.Annotations[AnnotationBaseName] != base || m.Annotations[AnnotationBaseMirror] != copied {
		t.Errorf("index annotations: %v", m.Annotations)
	}
	img, _ := idx.Image(m.Manifests[0].Digest)
	manifest, _ := img.Manifest()
	if manifest.Annotations[AnnotationBaseName] != base || manifest.Annotations[AnnotationBaseDigest] != got.images[0].base.Platforms["linux/amd64"] {
		t.Errorf("manifest annotations: %v", manifest.Annotations)
	}
}

func copyBase(t *testing.T, from, to string) {
	t.Helper()
	src, _ := name.ParseReference(from)
	dst, _ := name.ParseReference(to)
	idx, err := remote.Index(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.WriteIndex(dst, idx); err != nil {
		t.Fatal(err)
	}
}

// A registry that refuses connections fails the resolution at once, naming the mirror, the host
// and what it was needed for: go-containerregistry does not retry it.
func TestUnreachableMirrorFailsAtOnce(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().String()
	l.Close()
	mirrors, _ := registry.ParseMirrors("ghcr.io=" + closed + "/ghcr")
	reg, _ := registry.NewRegistries(registry.WithMirrors(mirrors))
	start := time.Now()
	base := ResolveBase(context.Background(), reg, DefaultBase+":1.0.0-alpha.289")
	if base.Err == nil {
		t.Fatal("resolved from a closed port")
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("took %s", d)
	}
	img := &Image{Name: "composition-front", Base: base.Ref, base: base, Unresolved: "x"}
	err = unresolved(&Plan{images: []*Image{img}})
	want := "the base ghcr.io/toa-io/runtime:1.0.0-alpha.289 from the mirror " + closed + "/ghcr/toa-io/runtime:1.0.0-alpha.289 (--mirror ghcr.io=" +
		closed + "/ghcr): cannot connect to " + closed + ": connect: connection refused (needed to resolve the base of composition-front)"
	if err == nil || err.Error() != want {
		t.Errorf("got  %v\nwant %s", err, want)
	}
}
