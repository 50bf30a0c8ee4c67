package registry

import (
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	ggcrregistry "github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// A Fresh blob is sent without asking whether the repository holds it (a HEAD, one round trip
// on the path of the push); another is asked for first, and not sent when it is there.
func TestFreshBlobIsNotAskedFor(t *testing.T) {
	var mu sync.Mutex
	var requests []string
	inner := ggcrregistry.New(ggcrregistry.Logger(log.New(io.Discard, "", 0)))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		requests = append(requests, r.Method+" "+r.URL.Path+"?"+r.URL.RawQuery)
		mu.Unlock()
		inner.ServeHTTP(w, r)
	}))
	defer srv.Close()
	repo, err := name.NewRepository(strings.TrimPrefix(srv.URL, "http://")+"/app", name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	held := static.NewLayer([]byte("a document the registry holds"), types.OCILayer)
	if err := remote.WriteLayer(repo, held); err != nil {
		t.Fatal(err)
	}
	fresh := static.NewLayer([]byte("a document that names a new image"), types.OCILayer)
	img, err := mutate.Append(mutate.MediaType(empty.Image, types.OCIManifestSchema1),
		mutate.Addendum{Layer: held}, mutate.Addendum{Layer: Fresh(fresh)})
	if err != nil {
		t.Fatal(err)
	}
	idx := mutate.AppendManifests(mutate.IndexMediaType(empty.Index, types.OCIImageIndex), mutate.IndexAddendum{Add: img})
	reg, err := NewRegistries()
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	requests = nil
	mu.Unlock()
	if err := reg.WriteIndex(t.Context(), repo.Tag("v1"), idx); err != nil {
		t.Fatal(err)
	}
	heldDigest, freshDigest := digestOfLayer(t, held), digestOfLayer(t, fresh)
	var askedHeld, askedFresh, sentHeld, sentFresh bool
	for _, r := range requests {
		switch {
		case strings.HasPrefix(r, "HEAD ") && strings.Contains(r, heldDigest):
			askedHeld = true
		case strings.HasPrefix(r, "HEAD ") && strings.Contains(r, freshDigest):
			askedFresh = true
		case strings.HasPrefix(r, "PUT ") && strings.Contains(r, "digest="+strings.Replace(heldDigest, ":", "%3A", 1)):
			sentHeld = true
		case strings.HasPrefix(r, "PUT ") && strings.Contains(r, "digest="+strings.Replace(freshDigest, ":", "%3A", 1)):
			sentFresh = true
		}
	}
	if askedFresh || !sentFresh {
		t.Errorf("the fresh blob: asked for %v, sent %v; want sent without asking: %v", askedFresh, sentFresh, requests)
	}
	if !askedHeld || sentHeld {
		t.Errorf("the blob the registry holds: asked for %v, sent %v; want asked for and not sent: %v", askedHeld, sentHeld, requests)
	}
	got, err := remote.Image(repo.Tag("v1"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := got.LayerByDigest(v1.Hash{Algorithm: "sha256", Hex: strings.TrimPrefix(freshDigest, "sha256:")}); err != nil {
		t.Error(err)
	}
}

func digestOfLayer(t *testing.T, l v1.Layer) string {
	t.Helper()
	d, err := l.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d.String()
}
