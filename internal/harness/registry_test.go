package harness

import (
	"io"
	"net/http"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

func TestRegistryAnswers(t *testing.T) {
	addr := Registry(t)
	resp, err := http.Get("http://" + addr + "/v2/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /v2/: %s", resp.Status)
	}
	if got := resp.Header.Get("Docker-Distribution-Api-Version"); got != "registry/2.0" {
		t.Errorf("Docker-Distribution-Api-Version = %q, want registry/2.0 (a real Distribution)", got)
	}
}

func TestRegistryWithLogRecordsAPush(t *testing.T) {
	addr, rec := RegistryWithLog(t)
	img, err := random.Image(4096, 3)
	if err != nil {
		t.Fatal(err)
	}
	ref := mustRef(t, addr+"/test/random:v1")
	if err := remote.Write(ref, img); err != nil {
		t.Fatalf("push: %v", err)
	}

	// What a first push of a 3-layer image sends: 3 layers and a config, then a manifest,
	// and nothing else in request bodies.
	blobs := blobSizes(t, img)
	manifest, err := img.RawManifest()
	if err != nil {
		t.Fatal(err)
	}
	if got := len(rec.BlobUploads()); got != len(blobs) {
		t.Errorf("blob uploads = %d, want %d: %+v", got, len(blobs), rec.BlobUploads())
	}
	if got := len(rec.ManifestPuts()); got != 1 {
		t.Errorf("manifest PUTs = %d, want 1", got)
	}
	var want int64 = int64(len(manifest))
	for _, n := range blobs {
		want += n
	}
	if got := rec.BytesSent(); got != want {
		t.Errorf("bytes sent = %d, want %d (blobs and manifest)", got, want)
	}
	for _, q := range rec.Requests() {
		if q.Status >= 400 && !(q.Method == http.MethodHead && q.Status == http.StatusNotFound) {
			t.Errorf("%s %s?%s answered %d", q.Method, q.Path, q.Query, q.Status)
		}
	}

	// It reads back as the same image, through the proxy.
	got, err := remote.Image(ref)
	if err != nil {
		t.Fatalf("read back: %v", err)
	}
	if gd, wd := digestOf(t, got), digestOf(t, img); gd != wd {
		t.Errorf("read back digest %s, pushed %s", gd, wd)
	}
	layers, err := got.Layers()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range layers {
		rc, err := l.Compressed() // verified against its digest as it is read
		if err != nil {
			t.Fatal(err)
		}
		_, err = io.Copy(io.Discard, rc)
		rc.Close()
		if err != nil {
			t.Fatalf("read a layer back: %v", err)
		}
	}
	if len(rec.BlobGets()) != len(layers) {
		t.Errorf("blob GETs = %d, want %d layers (the config came with remote.Image)",
			len(rec.BlobGets()), len(layers))
	}

	// Pushing it again: the client finds every blob and sends none.
	rec.Reset()
	if err := remote.Write(ref, img); err != nil {
		t.Fatalf("push again: %v", err)
	}
	if n := len(rec.BlobUploads()); n != 0 {
		t.Errorf("second push uploaded %d blobs, want 0", n)
	}
	if len(rec.Heads()) == 0 {
		t.Errorf("second push made no HEAD requests: %+v", rec.Requests())
	}
	if n := rec.BytesSent(); n > int64(len(manifest)) {
		t.Errorf("second push sent %d bytes, want at most the manifest's %d", n, len(manifest))
	}

	// Into another repository of the same registry: blobs are mounted, not uploaded.
	rec.Reset()
	if err := remote.Write(mustRef(t, addr+"/other/random:v1"), got); err != nil {
		t.Fatalf("push to another repository: %v", err)
	}
	if n := len(rec.BlobUploads()); n != 0 {
		t.Errorf("push to another repository uploaded %d blobs, want 0 (mounts): %+v", n, rec.Requests())
	}
	mounted := 0
	for _, q := range rec.Mounts() {
		if q.Status == http.StatusCreated {
			mounted++
		}
	}
	if mounted != len(blobs) {
		t.Errorf("mounted %d blobs, want %d (layers and config): %+v", mounted, len(blobs), rec.Mounts())
	}
}

func mustRef(t testing.TB, s string) name.Reference {
	t.Helper()
	ref, err := name.ParseReference(s, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	return ref
}

func digestOf(t testing.TB, img interface{ Digest() (v1.Hash, error) }) v1.Hash {
	t.Helper()
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// blobSizes returns the sizes of an image's layers and config.
func blobSizes(t testing.TB, img v1.Image) []int64 {
	t.Helper()
	m, err := img.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	sizes := []int64{m.Config.Size}
	for _, l := range m.Layers {
		sizes = append(sizes, l.Size)
	}
	return sizes
}
