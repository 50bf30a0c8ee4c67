package image

import (
	"context"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/toa-deploy/toa-deploy/internal/harness"
	"github.com/toa-deploy/toa-deploy/internal/registry"
)

// The first push of an application of two compositions whose base is on another registry sends
// each distinct blob once: the base's layers go to the first composition's repository, and the
// second mounts them from there. Each registry is pinged once, and no blob the run already knows
// is asked for with a HEAD.
func TestFirstPushSendsEachBlobOnce(t *testing.T) {
	baseAddr, baseRec := harness.RegistryWithLog(t)
	baseRef := harness.PushLayeredBase(t, baseAddr)
	addr, rec := harness.RegistryWithLog(t)
	dir := harness.TwoCompositions(t, addr, baseRef)
	baseRec.Reset()

	reg, err := registry.NewRegistries()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pushWith(context.Background(), t, dir, baseRef, reg); err != nil {
		t.Fatal(err)
	}
	rec, basePings := rec.Snapshot(), baseRec.Pings()
	if err := harness.Complete(context.Background(), addr); err != nil {
		t.Fatal(err)
	}
	distinct := harness.DistinctBlobs(t, addr)
	var want int64
	for _, size := range distinct {
		want += size
	}
	count, sent := rec.CompletedUploads()
	t.Logf("sent %d bytes in %d uploads and %d mounts, %d requests; the distinct blobs are %d bytes in %d blobs",
		sent, len(rec.BlobUploads()), len(rec.Mounts()), len(rec.Requests()), want, len(distinct))
	for d, n := range count {
		if n > 1 {
			t.Errorf("%s uploaded %d times", d, n)
		}
	}
	if sent != want {
		t.Errorf("sent %d bytes of blobs, the distinct blobs are %d bytes", sent, want)
	}
	mounted := 0
	for _, m := range rec.Mounts() {
		if m.Status == http.StatusCreated {
			mounted++
		}
	}
	if mounted == 0 {
		t.Errorf("nothing was mounted: %+v", rec.Mounts())
	}
	if p := rec.Pings(); p != 1 {
		t.Errorf("%d pings of the target registry, want 1", p)
	}
	if p := basePings; p != 1 {
		t.Errorf("%d pings of the base's registry, want 1", p)
	}
	heads := map[string]int{}
	for _, r := range rec.Heads() {
		if strings.Contains(r.Path, "/blobs/") {
			heads[r.Path[strings.LastIndex(r.Path, "/")+1:]]++
		}
	}
	for d, n := range heads {
		if n > 1 {
			t.Errorf("the blob %s was asked for %d times", d, n)
		}
		if _, ok := distinct[d]; !ok {
			t.Errorf("a HEAD of %s, which no image holds", d)
		}
	}
	// what was mounted was not asked for first: the run knew where it was
	for _, m := range rec.Mounts() {
		q, _ := url.ParseQuery(m.Query)
		if heads[q.Get("mount")] > 0 && strings.Contains(m.Path, "composition-back") == strings.Contains(q.Get("from"), "composition-back") {
			t.Errorf("the mounted blob %s was asked for with a HEAD too", q.Get("mount"))
		}
	}
}

// A later run that writes a new repository mounts the blobs an earlier run sent, from the
// repository it sent them to: the push remembers which repository holds what.
func TestLaterRunMountsWhatAnEarlierOneSent(t *testing.T) {
	baseAddr, _ := harness.RegistryWithLog(t)
	baseRef := harness.PushLayeredBase(t, baseAddr)
	addr, rec := harness.RegistryWithLog(t)
	dir := harness.TwoCompositions(t, addr, baseRef)
	memory := t.TempDir()

	reg, _ := registry.NewRegistries(registry.WithMemory(memory))
	if _, err := pushWith(context.Background(), t, dir, baseRef, reg); err != nil {
		t.Fatal(err)
	}
	// a third composition: a repository no run has written
	ctxFile := filepath.Join(dir, "context.toa.yaml")
	data, _ := os.ReadFile(ctxFile)
	os.WriteFile(ctxFile, []byte(string(data)+"  - name: extra\n    components: [shop.orders]\n"), 0o644)
	rec.Reset()
	reg, _ = registry.NewRegistries(registry.WithMemory(memory))
	if _, err := pushWith(context.Background(), t, dir, baseRef, reg); err != nil {
		t.Fatal(err)
	}
	count, sent := rec.CompletedUploads()
	t.Logf("the new composition: %d bytes sent in %d uploads, %d mounts", sent, len(count), len(rec.Mounts()))
	base := distinctBaseLayers(t, baseRef)
	for d := range count {
		if base[d] {
			t.Errorf("the base's layer %s was sent again", d)
		}
	}
	mounted := 0
	for _, m := range rec.Mounts() {
		q, _ := url.ParseQuery(m.Query)
		if m.Status == http.StatusCreated && base[q.Get("mount")] {
			mounted++
		}
	}
	if mounted == 0 {
		t.Errorf("no layer of the base was mounted: %+v", rec.Mounts())
	}
}

func distinctBaseLayers(t *testing.T, ref string) map[string]bool {
	t.Helper()
	r, _ := name.ParseReference(ref, name.Insecure)
	idx, err := remote.Index(r)
	if err != nil {
		t.Fatal(err)
	}
	m, _ := idx.IndexManifest()
	out := map[string]bool{}
	for _, d := range m.Manifests {
		img, _ := idx.Image(d.Digest)
		ls, _ := img.Layers()
		for _, l := range ls {
			h, _ := l.Digest()
			out[h.String()] = true
		}
	}
	return out
}

// A registry that answers mounts with an upload is asked for a mount once; every other blob is
// sent without asking, and the push completes.
func TestRegistryThatDoesNotMount(t *testing.T) {
	baseAddr, _ := harness.RegistryWithLog(t)
	baseRef := harness.PushLayeredBase(t, baseAddr)
	target := harness.FaultyRegistry(t)
	target.Inject(harness.Fault{Match: harness.Mount, Kind: harness.NoMount})
	dir := harness.TwoCompositions(t, target.Addr, baseRef)
	var notices []string
	reg, _ := registry.NewRegistries(registry.WithNotify(func(s string) { notices = append(notices, s) }))
	if _, err := pushWith(context.Background(), t, dir, baseRef, reg); err != nil {
		t.Fatal(err)
	}
	if n := len(target.Mounts()); n != 1 {
		t.Errorf("%d mount requests, want 1", n)
	}
	if len(notices) != 1 || !strings.Contains(notices[0], "does not mount blobs") {
		t.Errorf("notices: %q", notices)
	}
	if err := harness.Complete(context.Background(), target.Addr); err != nil {
		t.Error(err)
	}
}
