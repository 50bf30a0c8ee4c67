package main

import (
	"archive/tar"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/toa-deploy/toa-deploy/internal/harness"
)

// copyApp copies a testdata application into a new folder, pointing it at the test registry.
// The packages linked under its node_modules (the stand-in extensions) are linked from the copy.
func copyApp(t *testing.T, app, registry string) string {
	t.Helper()
	src := filepath.Join("..", "..", "testdata", "apps", app)
	dst := filepath.Join(t.TempDir(), app)
	err := filepath.Walk(src, func(path string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		if info.Mode()&os.ModeSymlink != 0 {
			target, err := filepath.EvalSymlinks(path)
			if err != nil {
				return err
			}
			abs, err := filepath.Abs(target)
			if err != nil {
				return err
			}
			return os.Symlink(abs, filepath.Join(dst, rel))
		}
		if info.IsDir() {
			if info.Name() == "node_modules" && filepath.Dir(rel) != "." {
				return filepath.SkipDir
			}
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if info.Name() == "context.toa.yaml" {
			data = []byte(strings.ReplaceAll(string(data), "localhost:5000", registry))
		}
		return os.WriteFile(filepath.Join(dst, rel), data, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	return dst
}

type pushOutput struct {
	Images []struct {
		Name      string   `json:"name"`
		Reference string   `json:"reference"`
		Tag       string   `json:"tag"`
		Digest    string   `json:"digest"`
		Platforms []string `json:"platforms"`
		Built     bool     `json:"built"`
		DepsBuilt bool     `json:"dependenciesBuilt"`
		BytesSent int64    `json:"bytesSent"`
	} `json:"images"`
}

// push runs toa-push -o json on the application, with its own layer cache, and reads what it
// pushed back with skopeo (readPushed).
func push(t *testing.T, dir, cache string, extra ...string) pushOutput {
	t.Helper()
	return pushed(t, dir, cache, extra...).out
}

// pushRun is a toa-push run: its output, what skopeo read of its images by name, and what it
// logged.
type pushRun struct {
	out    pushOutput
	reads  map[string]*harness.Read
	stderr string
}

func pushed(t *testing.T, dir, cache string, extra ...string) pushRun {
	t.Helper()
	run := pushUnread(t, dir, cache, extra...)
	run.reads = readPushed(t, run.out, extra...)
	return run
}

// pushRecorded pushes as push does, and returns with the output what rec saw of the push alone:
// from a Reset to the end of the push, before skopeo reads the images back.
func pushRecorded(t *testing.T, rec *harness.Recorder, dir, cache string, extra ...string) (pushOutput, *harness.Recorder) {
	t.Helper()
	rec.Reset()
	run := pushUnread(t, dir, cache, extra...)
	seen := rec.Snapshot()
	readPushed(t, run.out, extra...)
	return run.out, seen
}

// pushUnread runs toa-push -o json; the caller reads what it pushed with readPushed.
func pushUnread(t *testing.T, dir, cache string, extra ...string) pushRun {
	t.Helper()
	t.Setenv("TOA_CACHE", cache)
	args := append([]string{"-o", "json", "--path", dir, "-k", filepath.Join(dir, "deployment")}, extra...)
	code, stdout, stderr := run(t, dir, args...)
	if code != 0 {
		t.Fatalf("toa-push exited %d:\n%s", code, stderr)
	}
	var out pushOutput
	if err := json.Unmarshal([]byte(stdout), &out); err != nil {
		t.Fatalf("toa-push -o json: %v\n%s", err, stdout)
	}
	return pushRun{out: out, stderr: stderr}
}

// index reads an index back; the tests' registries speak plain HTTP, on loopback or in a
// network namespace.
func index(t *testing.T, ref string) (v1.ImageIndex, *v1.IndexManifest) {
	t.Helper()
	r, err := name.ParseReference(ref, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	idx, err := remote.Index(r)
	if err != nil {
		t.Fatalf("read %s back: %v", ref, err)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	return idx, m
}

// files lists the paths of an image's layers, top layer last.
func files(t *testing.T, img v1.Image) map[string]bool {
	t.Helper()
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, l := range layers {
		rc, err := l.Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		tr := tar.NewReader(rc)
		for {
			h, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			out[strings.TrimPrefix(h.Name, "/")] = true
		}
		rc.Close()
	}
	return out
}

func platformImage(t *testing.T, idx v1.ImageIndex, m *v1.IndexManifest, arch string) v1.Image {
	t.Helper()
	for _, d := range m.Manifests {
		if d.Platform != nil && d.Platform.Architecture == arch {
			img, err := idx.Image(d.Digest)
			if err != nil {
				t.Fatal(err)
			}
			return img
		}
	}
	t.Fatalf("no %s image in the index", arch)
	return nil
}

func TestPushEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("needs a registry and npm")
	}
	addr, rec := harness.RegistryWithLog(t)
	harness.PushTestBase(t, addr)
	dir := copyApp(t, "pushed", addr)
	cache := t.TempDir()

	first, seen := pushRecorded(t, rec, dir, cache)
	t.Logf("first push: %d requests, %d bytes sent", len(seen.Requests()), seen.BytesSent())
	if len(first.Images) != 2 {
		t.Fatalf("%d images", len(first.Images))
	}
	front := first.Images[0]
	if front.Name != "composition-front" || !front.Built || !front.DepsBuilt || front.Digest == "" {
		t.Fatalf("front: %+v", front)
	}

	t.Run("1 the index, its platforms and layers read back", func(t *testing.T) {
		idx, m := index(t, front.Reference)
		if len(m.Manifests) != 2 {
			t.Fatalf("%d manifests", len(m.Manifests))
		}
		amd, arm := platformImage(t, idx, m, "amd64"), platformImage(t, idx, m, "arm64")
		fa, fb := files(t, amd), files(t, arm)
		for _, want := range []string{"composition/shop-orders/operations.js", "composition/shop-orders/node_modules/is-number/index.js",
			"composition/shop-prices/quote.js", "composition/shop-prices/node_modules/esbuild/package.json"} {
			if !fa[want] || !fb[want] {
				t.Errorf("%s missing (amd64 %v, arm64 %v)", want, fa[want], fb[want])
			}
		}
		for _, never := range []string{"composition/shop-orders/.npmrc", "composition/shop-orders/node_modules/.package-lock.json/.npmrc"} {
			if fa[never] {
				t.Errorf("%s is in the image", never)
			}
		}
		cfg, _ := amd.ConfigFile()
		if got := strings.Join(cfg.Config.Cmd, " "); got != "toa compose shop-orders shop-prices" {
			t.Errorf("command %q", got)
		}
	})

	t.Run("7 each platform gets its own esbuild binary", func(t *testing.T) {
		idx, m := index(t, front.Reference)
		fa, fb := files(t, platformImage(t, idx, m, "amd64")), files(t, platformImage(t, idx, m, "arm64"))
		x64, arm64 := "composition/shop-prices/node_modules/@esbuild/linux-x64/package.json", "composition/shop-prices/node_modules/@esbuild/linux-arm64/package.json"
		if !fa[x64] || fa[arm64] || !fb[arm64] || fb[x64] {
			t.Errorf("amd64: x64 %v arm64 %v; arm64: x64 %v arm64 %v", fa[x64], fa[arm64], fb[x64], fb[arm64])
		}
	})

	t.Run("6 the amd64 image runs its command under chroot and with podman", func(t *testing.T) {
		idx, m := index(t, front.Reference)
		img := platformImage(t, idx, m, "amd64")
		cfg, _ := img.ConfigFile()
		root := harness.Unpack(t, img)
		stdout, stderr, code := harness.Chroot(t, root, cfg.Config)
		if code != 0 {
			t.Fatalf("toa compose exited %d:\n%s\n%s", code, stdout, stderr)
		}
		for _, want := range []string{`"component":"shop-orders"`, `"is-number"`, `"component":"shop-prices"`, `"esbuild"`, "composed 2 components"} {
			if !strings.Contains(stdout, want) {
				t.Errorf("toa compose printed no %s:\n%s", want, stdout)
			}
		}
		// the same image pulled and run by podman (containers/image, runc), as CRI-O would
		podmanOut, podmanErr, podmanCode := harness.Podman(t, front.Reference)
		if podmanCode != 0 || podmanOut != stdout {
			t.Errorf("podman run exited %d:\n%s\n%s\nwant what it printed under chroot:\n%s", podmanCode, podmanOut, podmanErr, stdout)
		}
	})

	t.Run("2 a second push uploads nothing", func(t *testing.T) {
		again, seen := pushRecorded(t, rec, dir, cache)
		t.Logf("no change: %d requests, %d bytes sent", len(seen.Requests()), seen.BytesSent())
		if again.Images[0].Built || again.Images[0].Digest != front.Digest {
			t.Errorf("no-change push rebuilt: %+v", again.Images[0])
		}
		if n := len(seen.BlobUploads()); n != 0 {
			t.Errorf("%d blobs uploaded", n)
		}
		if n := len(seen.Filter(harness.Request.IsManifestPut)); n != 0 {
			t.Errorf("%d manifests written", n)
		}
	})

	t.Run("3 a code change uploads one sources layer, configs, manifests and the index", func(t *testing.T) {
		appendLine(t, filepath.Join(dir, "components/shop.orders/operations.js"), "// a one-line change\n")
		changed, seen := pushRecorded(t, rec, dir, cache)
		t.Logf("code change: %d requests, %d bytes sent, %d blob uploads, %d manifest puts", len(seen.Requests()), seen.BytesSent(),
			len(seen.BlobUploads()), len(seen.Filter(harness.Request.IsManifestPut)))
		if !changed.Images[0].Built || changed.Images[0].DepsBuilt || changed.Images[1].Built {
			t.Fatalf("code change: %+v", changed.Images)
		}
		// the sources layer, two configs; what is attached: the provenance (each platform's SBOM
		// is the dependencies image's document, which the registry holds)
		if n := len(seen.BlobUploads()); n != 3+1 {
			t.Errorf("%d blobs uploaded, want 4", n)
		}
		// two manifests, the index; five referrers (each platform's SBOM on its image and on
		// the index, the provenance) and, Distribution 2.8 having no referrers API, the
		// referrers tag of each of the three subjects
		if n := len(seen.Filter(harness.Request.IsManifestPut)); n != 3+5+3 {
			t.Errorf("%d manifests written, want 11", n)
		}
	})

	t.Run("4 a package.json change reinstalls that component alone", func(t *testing.T) {
		component := filepath.Join(dir, "components/shop.orders")
		pkg := filepath.Join(component, "package.json")
		data, _ := os.ReadFile(pkg)
		os.WriteFile(pkg, []byte(strings.Replace(string(data), `"is-number": "7.0.0"`, `"is-number": "6.0.0"`, 1)), 0o644)
		lock := exec.Command("npm", "install", "--package-lock-only", "--no-audit", "--no-fund", "--omit-lockfile-registry-resolved")
		lock.Dir = component
		if out, err := lock.CombinedOutput(); err != nil {
			t.Fatalf("update the lockfile: %v\n%s", err, out)
		}
		changed, seen := pushRecorded(t, rec, dir, cache)
		uploads := seen.BlobUploads()
		t.Logf("package.json change: %d requests, %d bytes sent, %d blob uploads, %d manifest puts", len(seen.Requests()), seen.BytesSent(),
			len(uploads), len(seen.Filter(harness.Request.IsManifestPut)))
		if !changed.Images[0].DepsBuilt || changed.Images[1].Built {
			t.Fatalf("package.json change: %+v", changed.Images)
		}
		// orders' node_modules, its metadata and the bucket of is-number (which has no platform
		// of its own, so both platforms' layers are the same blobs), orders' sources, two deps
		// configs and two configs; the new dependencies images' two documents and the provenance
		if n := len(uploads); n != 7+3 {
			t.Errorf("%d blobs uploaded, want 10", n)
		}
		// prices' node_modules, with esbuild's binaries, are megabytes: none of them is sent again
		if sent := seen.BytesSent(); sent > 1<<20 {
			t.Errorf("%d bytes sent: more than orders' small layers", sent)
		}
		// two deps manifests and their index, two manifests and the index; five referrers and
		// the referrers tags of their three subjects
		if n := len(seen.Filter(harness.Request.IsManifestPut)); n != 6+5+3 {
			t.Errorf("%d manifests written, want 14", n)
		}
	})

	t.Run("5 the same digests from another folder and another cache", func(t *testing.T) {
		other, _ := harness.RegistryWithLog(t)
		harness.PushTestBase(t, other)
		a := copyApp(t, "pushed", other)
		b := copyApp(t, "pushed", addr)
		// the copies hold the original files; both registries get the same base
		pa := push(t, a, t.TempDir())
		pb := push(t, b, t.TempDir())
		for i := range pa.Images {
			if pa.Images[i].Digest != pb.Images[i].Digest {
				t.Errorf("%s: %s here, %s there", pa.Images[i].Name, pa.Images[i].Digest, pb.Images[i].Digest)
			}
		}
	})
}

func appendLine(t *testing.T, path, line string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(line); err != nil {
		t.Fatal(err)
	}
}
