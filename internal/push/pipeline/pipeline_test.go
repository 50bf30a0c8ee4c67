package pipeline

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"sigs.k8s.io/yaml"

	"github.com/toa-deploy/toa-deploy/internal/app/toa"
	"github.com/toa-deploy/toa-deploy/internal/fault"
	"github.com/toa-deploy/toa-deploy/internal/harness"
	"github.com/toa-deploy/toa-deploy/internal/push/image"
	"github.com/toa-deploy/toa-deploy/layer"
)

// These tests run the whole pipeline against go-containerregistry's in-memory registry, with
// layers made without npm: the push logic, hermetic, in `make unit`. The same paths against a
// real registry, with npm, are cmd/toa-push's end-to-end tests.

// memoryRegistry serves go-containerregistry's in-memory registry, with its requests recorded, and
// pushes the test base to it where the pushed application names it.
func memoryRegistry(t *testing.T) (string, *harness.Recorder, func()) {
	t.Helper()
	addr, rec, stop := harness.MemoryRegistryWithLog(t)
	harness.PushRandomBase(t, addr+"/bases/node:test")
	rec.Reset()
	return addr, rec, stop
}

// heads are the HEADs of the application's images.
func heads(rec *harness.Recorder) int {
	return len(rec.Filter(func(r harness.Request) bool {
		return r.Method == http.MethodHead && strings.Contains(r.Path, "/manifests/")
	}))
}

// copyApp copies a testdata application into a new folder, with the registry's address in
// place of localhost:5000. The packages linked under its node_modules are linked from the copy.
func copyApp(t *testing.T, app, registry string) string {
	t.Helper()
	src := filepath.Join("..", "..", "..", "testdata", "apps", app)
	dst := filepath.Join(t.TempDir(), app)
	err := filepath.Walk(src, func(path string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		switch {
		case info.Mode()&os.ModeSymlink != 0:
			target, err := filepath.EvalSymlinks(path)
			if err != nil {
				return err
			}
			abs, err := filepath.Abs(target)
			if err != nil {
				return err
			}
			return os.Symlink(abs, filepath.Join(dst, rel))
		case info.IsDir():
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if info.Name() == toa.ContextFile {
			data = []byte(strings.ReplaceAll(string(data), "localhost:5000", registry))
		}
		return os.WriteFile(filepath.Join(dst, rel), data, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	return dst
}

// fakeLayers makes small deterministic layers of the components' files, without npm: the layer
// package has its own tests.
type fakeLayers struct{}

func (fakeLayers) Sources(components []*toa.Component) (v1.Layer, error) {
	files := map[string][]byte{}
	for _, c := range components {
		entries, err := os.ReadDir(c.Path)
		if err != nil {
			return nil, err
		}
		for _, e := range entries {
			if e.Type().IsRegular() {
				data, err := os.ReadFile(filepath.Join(c.Path, e.Name()))
				if err != nil {
					return nil, err
				}
				files["composition/"+c.Locator.Label+"/"+e.Name()] = data
			}
		}
	}
	return harness.TarLayer(files)
}

func (fakeLayers) Dependencies(_ context.Context, c *toa.Component, t image.Target, _ int) ([]v1.Layer, error) {
	if c.PackageJSON == "" {
		return nil, nil
	}
	pkg, err := os.ReadFile(c.PackageJSON)
	if err != nil {
		return nil, err
	}
	l, err := harness.TarLayer(map[string][]byte{"composition/" + c.Locator.Label + "/node_modules/.installed": append(pkg, t.Platform.Architecture...)})
	if err != nil {
		return nil, err
	}
	return []v1.Layer{l}, nil
}

func (fakeLayers) Global(context.Context, []string, image.Target) (v1.Layer, error) { return nil, nil }

// options of every test: its own cache, the fake layers, a toolchain not asked for.
func testOptions(t *testing.T, extra ...Option) []Option {
	return append([]Option{WithCacheDir(t.TempDir()), WithLayers(fakeLayers{}),
		WithToolchain(layer.Toolchain{Node: "20.0.0", Npm: "11.0.0"}), WithResolveTimeout(5 * time.Second)}, extra...)
}

// kustomizationImages reads the images entries of the kustomization in dir.
func kustomizationImages(t *testing.T, dir string) map[string]string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var k struct {
		Images []struct{ Name, NewTag, Digest string }
	}
	if err := yaml.Unmarshal(data, &k); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, img := range k.Images {
		out[img.Name] = img.NewTag + img.Digest
	}
	return out
}

// The push paths of the pipeline, hermetic: a plan, a first push, a push with no change, a code
// change, and a failed push that leaves no tag.
func TestPushToARegistry(t *testing.T) {
	harness.Program(t, "node", "install Node.js 20 or later: the extensions are asked through node")
	addr, rec, _ := memoryRegistry(t)
	dir := copyApp(t, "pushed", addr)
	k := filepath.Join(t.TempDir(), "deployment")
	opts := testOptions(t, WithKustomization(k))
	ctx := context.Background()

	plan, err := Plan(ctx, dir, "default", opts...)
	if err != nil {
		t.Fatal(err)
	}
	if len(plan.Digests) != 0 || plan.Kustomization != k {
		t.Errorf("a plan of nothing pushed: digests %v, kustomization %q", plan.Digests, plan.Kustomization)
	}
	for _, img := range plan.Plan.Images() {
		if got := kustomizationImages(t, k)[img.Repository]; got != img.Tag {
			t.Errorf("%s pinned by %q, want its tag %s", img.Repository, got, img.Tag)
		}
	}

	rec.Reset()
	first, err := Push(ctx, dir, "default", opts...)
	if err != nil {
		t.Fatal(err)
	}
	if len(first.Result.Images) != 2 {
		t.Fatalf("images %+v", first.Result.Images)
	}
	for _, p := range first.Result.Images {
		if !p.Built || !p.DepsBuilt || !strings.HasPrefix(p.Digest, "sha256:") || len(p.Platforms) != 2 {
			t.Errorf("first push: %+v", p)
		}
		if got := kustomizationImages(t, k)[p.Repository]; got != p.Digest {
			t.Errorf("%s pinned by %q, want %s", p.Repository, got, p.Digest)
		}
		assertComplete(t, p.Repository+":"+p.Tag)
	}
	t.Logf("first push: %d blobs, %d manifests", len(rec.BlobUploads()), len(rec.ManifestPuts()))

	t.Run("no change sends nothing", func(t *testing.T) {
		rec.Reset()
		again, err := Push(ctx, dir, "default", opts...)
		if err != nil {
			t.Fatal(err)
		}
		for i, p := range again.Result.Images {
			if p.Built || p.Digest != first.Result.Images[i].Digest {
				t.Errorf("no-change push: %+v", p)
			}
		}
		if len(rec.BlobUploads()) != 0 || len(rec.ManifestPuts()) != 0 || heads(rec) != 2 {
			t.Errorf("%d blobs, %d manifests written, %d HEADs of images (want 0, 0, 2)", len(rec.BlobUploads()), len(rec.ManifestPuts()), heads(rec))
		}
		plan, err := Plan(ctx, dir, "default", opts...)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range first.Result.Images {
			if plan.Digests[p.Repository] != p.Digest || kustomizationImages(t, k)[p.Repository] != p.Digest {
				t.Errorf("a plan of what is pushed does not pin %s by %s: %v", p.Repository, p.Digest, plan.Digests)
			}
		}
	})

	t.Run("a code change builds one image over its dependencies image", func(t *testing.T) {
		code := filepath.Join(dir, "components", "shop.prices", "quote.js")
		if err := os.WriteFile(code, []byte("exports.quote = () => 2\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		rec.Reset()
		changed, err := Push(ctx, dir, "default", opts...)
		if err != nil {
			t.Fatal(err)
		}
		front := changed.Result.Images[0]
		if !front.Built || front.DepsBuilt || front.Digest == first.Result.Images[0].Digest || changed.Result.Images[1].Built {
			t.Errorf("code change: %+v %+v", front, changed.Result.Images[1])
		}
		// the sources layer (once for both platforms), two configs; two manifests and the index
		if len(rec.BlobUploads()) != 3 || len(rec.ManifestPuts()) != 3 {
			t.Errorf("code change: %d blobs and %d manifests written, want 3 and 3", len(rec.BlobUploads()), len(rec.ManifestPuts()))
		}
		assertComplete(t, front.Repository+":"+front.Tag)
	})

	t.Run("a failed push leaves no tag and writes no kustomization", func(t *testing.T) {
		code := filepath.Join(dir, "components", "shop.prices", "quote.js")
		if err := os.WriteFile(code, []byte("exports.quote = () => 3\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		before, _ := os.ReadFile(filepath.Join(k, "kustomization.yaml"))
		_, err := Push(ctx, dir, "default", append(opts, WithLayers(failingSources{}))...)
		if err == nil || !strings.Contains(err.Error(), "the disk is full") {
			t.Fatalf("%v", err)
		}
		plan, err := Plan(ctx, dir, "default", append(opts, WithKustomization(t.TempDir()))...)
		if err != nil {
			t.Fatal(err)
		}
		if d := plan.Digests[plan.Plan.Images()[0].Repository]; d != "" {
			t.Errorf("the image of a failed push is tagged: %s", d)
		}
		after, _ := os.ReadFile(filepath.Join(k, "kustomization.yaml"))
		if !bytes.Equal(before, after) {
			t.Error("a failed push changed the kustomization")
		}
	})
}

type failingSources struct{ fakeLayers }

func (failingSources) Sources([]*toa.Component) (v1.Layer, error) {
	return nil, errors.New("the disk is full")
}

// assertComplete reads an index back whole: every manifest, config and layer of every platform
// is in the registry (the in-memory registry does not check a manifest's blobs on a put).
func assertComplete(t *testing.T, ref string) {
	t.Helper()
	r, err := name.ParseReference(ref, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	idx, err := remote.Index(r)
	if err != nil {
		t.Fatalf("%s: %v", ref, err)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range m.Manifests {
		img, err := idx.Image(d.Digest)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := img.RawConfigFile(); err != nil {
			t.Errorf("%s %s: config: %v", ref, d.Platform, err)
		}
		layers, err := img.Layers()
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range layers {
			rc, err := l.Compressed()
			if err == nil {
				_, err = io.Copy(io.Discard, rc)
				rc.Close()
			}
			if err != nil {
				t.Errorf("%s %s: a layer: %v", ref, d.Platform, err)
			}
		}
	}
}

// An OCI layout written with no target registry in reach, then pushed from: the same digests and
// the same kustomization as a push straight to the registry.
func TestPushThroughAnOCILayout(t *testing.T) {
	harness.Program(t, "node", "install Node.js 20 or later: the extensions are asked through node")
	addr, rec, _ := memoryRegistry(t)
	dir := copyApp(t, "pushed", addr)
	ctx := context.Background()

	layout := filepath.Join(t.TempDir(), "layout")
	rec.Reset()
	written, err := Push(ctx, dir, "default", testOptions(t, WithOCILayout(layout))...)
	if err != nil {
		t.Fatal(err)
	}
	if len(rec.BlobUploads()) != 0 || len(rec.ManifestPuts()) != 0 || heads(rec) != 0 {
		t.Errorf("the target registry was written to or asked: %d blobs, %d manifests, %d HEADs", len(rec.BlobUploads()), len(rec.ManifestPuts()), heads(rec))
	}
	if written.Kustomization != LayoutKustomization(layout) {
		t.Errorf("kustomization in %s", written.Kustomization)
	}

	k := filepath.Join(t.TempDir(), "deployment")
	pushed, err := PushLayout(ctx, layout, testOptions(t, WithKustomization(k))...)
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range pushed.Result.Images {
		if p.Digest != written.Result.Images[i].Digest || !p.Copied {
			t.Errorf("pushed from the layout: %+v, written %+v", p, written.Result.Images[i])
		}
		assertComplete(t, p.Repository+":"+p.Tag)
	}
	if pushed.Context != "shop" || pushed.Environment != "default" {
		t.Errorf("context %q, environment %q", pushed.Context, pushed.Environment)
	}
	a, _ := os.ReadFile(filepath.Join(LayoutKustomization(layout), "kustomization.yaml"))
	b, _ := os.ReadFile(filepath.Join(k, "kustomization.yaml"))
	if len(a) == 0 || !bytes.Equal(a, b) {
		t.Errorf("the kustomization pushed from the layout differs:\n%s\n%s", a, b)
	}

	straight := filepath.Join(t.TempDir(), "deployment")
	direct, err := Push(ctx, dir, "default", testOptions(t, WithKustomization(straight))...)
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range direct.Result.Images {
		if p.Built || p.Digest != written.Result.Images[i].Digest {
			t.Errorf("a push straight to the registry after the layout's: %+v", p)
		}
	}
}

// Output folders toa-push would refuse are refused before any work: nothing is asked of the
// registry, nothing built.
func TestOutputFoldersCheckedFirst(t *testing.T) {
	addr, rec, _ := memoryRegistry(t)
	dir := copyApp(t, "pushed", addr)
	foreign := t.TempDir()
	if err := os.WriteFile(filepath.Join(foreign, "notes.txt"), []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		opt  Option
		want string
	}{
		{"kustomization", WithKustomization(foreign), "holds files toa-push did not write"},
		{"OCI layout", WithOCILayout(foreign), "is neither empty nor an OCI image layout"},
	} {
		t.Run(c.name, func(t *testing.T) {
			rec.Reset()
			_, err := Push(context.Background(), dir, "default", testOptions(t, c.opt)...)
			if !fault.IsInput(err) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("%v", err)
			}
			if n := len(rec.Requests()); n != 0 {
				t.Errorf("%d requests before the refusal", n)
			}
		})
	}
	_, err := PushLayout(context.Background(), t.TempDir(), testOptions(t, WithKustomization(foreign))...)
	if !fault.IsInput(err) || !strings.Contains(err.Error(), "holds files toa-push did not write") {
		t.Errorf("--from-oci-layout: %v", err)
	}
}

// --plan with the base's registry stopped: planned from the digests an earlier plan kept, with a
// warning that says how old they are; never reached, nothing is written and the plan fails. A
// push never plans from the cache.
func TestPlanWithTheBaseRegistryStopped(t *testing.T) {
	harness.Program(t, "node", "install Node.js 20 or later: the extensions are asked through node")
	addr, _, stop := memoryRegistry(t)
	dir := copyApp(t, "pushed", addr)
	cache := t.TempDir()
	ctx := context.Background()
	k := filepath.Join(t.TempDir(), "deployment")
	reached, err := Plan(ctx, dir, "default", testOptions(t, WithCacheDir(cache), WithKustomization(k))...)
	if err != nil {
		t.Fatal(err)
	}
	tags := kustomizationImages(t, k)
	stop()

	var warnings []string
	later := func() time.Time { return time.Now().Add(3 * 24 * time.Hour) }
	offline := filepath.Join(t.TempDir(), "deployment")
	planned, err := Plan(ctx, dir, "default", testOptions(t, WithCacheDir(cache), WithKustomization(offline), withClock(later),
		WithWarnings(func(w string) { warnings = append(warnings, w) }))...)
	if err != nil {
		t.Fatal(err)
	}
	if got := kustomizationImages(t, offline); len(got) != 2 || got[reached.Plan.Images()[0].Repository] != tags[reached.Plan.Images()[0].Repository] {
		t.Errorf("planned offline %v, online %v", got, tags)
	}
	if planned.Plan.Images()[0].Tag != reached.Plan.Images()[0].Tag {
		t.Errorf("tags %s and %s", planned.Plan.Images()[0].Tag, reached.Plan.Images()[0].Tag)
	}
	if w := strings.Join(warnings, "\n"); !strings.Contains(w, "planned from its digests as they were 3 days ago") ||
		!strings.Contains(w, filepath.Join(cache, "bases")) || !strings.Contains(w, "cannot connect to "+addr) {
		t.Errorf("warnings:\n%s", w)
	}

	never := filepath.Join(t.TempDir(), "deployment")
	report, err := Plan(ctx, dir, "default", testOptions(t, WithKustomization(never))...)
	var notWritten *NotWrittenError
	if !errors.As(err, &notWritten) || report == nil || fault.ClassOf(err) != fault.ClassFailed ||
		!strings.Contains(err.Error(), "the tag of composition-front is not known: the base "+addr+"/bases/node:test: cannot connect to") {
		t.Errorf("a base never resolved: %v", err)
	}
	if _, err := os.Stat(never); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a kustomization without tags: %v", err)
	}

	_, err = Push(ctx, dir, "default", testOptions(t, WithCacheDir(cache), WithKustomization(t.TempDir()))...)
	if err == nil || !strings.Contains(err.Error(), "cannot connect to "+addr) {
		t.Errorf("a push with the base out of reach: %v", err)
	}
}

// A base whose registry answers that it is gone is not planned from the cache: the registry said
// something, and the plan fails with it instead of pinning what the tag used to be.
func TestPlanWithTheBaseGone(t *testing.T) {
	harness.Program(t, "node", "install Node.js 20 or later: the extensions are asked through node")
	addr, _, _ := memoryRegistry(t)
	dir := copyApp(t, "pushed", addr)
	cache := t.TempDir()
	ctx := context.Background()
	if _, err := Plan(ctx, dir, "default", testOptions(t, WithCacheDir(cache), WithKustomization(filepath.Join(t.TempDir(), "deployment")))...); err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodDelete, "http://"+addr+"/v2/bases/node/manifests/test", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("DELETE the base's tag: %s", resp.Status)
	}

	var warnings []string
	k := filepath.Join(t.TempDir(), "deployment")
	_, err = Plan(ctx, dir, "default", testOptions(t, WithCacheDir(cache), WithKustomization(k),
		WithWarnings(func(w string) { warnings = append(warnings, w) }))...)
	var notWritten *NotWrittenError
	if !errors.As(err, &notWritten) || !strings.Contains(err.Error(), "/bases/node:test: not found (404 Not Found)") || notWritten.Hint != "" {
		t.Errorf("a base the registry no longer has: %v", err)
	}
	if w := strings.Join(warnings, "\n"); strings.Contains(w, "planned from its digests") {
		t.Errorf("planned from the cache:\n%s", w)
	}
	if _, err := os.Stat(k); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a kustomization was written: %v", err)
	}
}

// A file that usually holds a secret in a component's sources is named by every run, --plan
// included, once, before anything is built; one the manifest's ignore leaves out is not.
func TestSecretsNamedByEveryRun(t *testing.T) {
	harness.Program(t, "node", "install Node.js 20 or later: the extensions are asked through node")
	addr, _, _ := memoryRegistry(t)
	dir := copyApp(t, "pushed", addr)
	orders := filepath.Join(dir, "components", "shop.orders")
	if err := os.WriteFile(filepath.Join(orders, ".env"), []byte("TOKEN=secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, run := range []struct {
		name string
		do   func(...Option) ([]string, error)
	}{
		{"plan", func(opts ...Option) ([]string, error) {
			r, err := Plan(ctx, dir, "default", opts...)
			if err != nil {
				return nil, err
			}
			return r.Warnings, nil
		}},
		{"push", func(opts ...Option) ([]string, error) {
			_, err := Push(ctx, dir, "default", opts...)
			return nil, err
		}},
	} {
		var warnings []string
		planned, err := run.do(testOptions(t, WithKustomization(filepath.Join(t.TempDir(), "deployment")),
			WithWarnings(func(w string) { warnings = append(warnings, w) }))...)
		if err != nil {
			t.Fatalf("%s: %v", run.name, err)
		}
		const want = "shop.orders: .env is in its sources and goes into its image"
		named := 0
		for _, w := range warnings {
			if strings.Contains(w, want) {
				named++
			}
		}
		if named != 1 {
			t.Errorf("%s: named %d times: %q", run.name, named, warnings)
		}
		if run.name == "plan" && !slices.ContainsFunc(planned, func(w string) bool { return strings.Contains(w, want) }) {
			t.Errorf("the plan's warnings lack it: %q", planned)
		}
	}
}
