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
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// A subject's referrers are written at once: on a registry without the referrers API, by digest,
// then its referrers tag read once and written once with them all, keeping what it listed; on one
// that answers with OCI-Subject, no tag is written.
func TestWriteReferrers(t *testing.T) {
	for _, indexes := range []bool{false, true} {
		var mu sync.Mutex
		var requests []string
		inner := ggcrregistry.New(ggcrregistry.Logger(log.New(io.Discard, "", 0)))
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			requests = append(requests, r.Method+" "+r.URL.Path)
			mu.Unlock()
			if indexes && r.Method == http.MethodPut && strings.Contains(r.URL.Path, "/manifests/sha256:") {
				w.Header().Set("OCI-Subject", "sha256:any")
			}
			inner.ServeHTTP(w, r)
		}))
		defer srv.Close()
		repo, err := name.NewRepository(strings.TrimPrefix(srv.URL, "http://")+"/app", name.Insecure)
		if err != nil {
			t.Fatal(err)
		}
		subject, err := random.Image(64, 1)
		if err != nil {
			t.Fatal(err)
		}
		if err := remote.Write(repo.Digest(digestOf(t, subject)), subject); err != nil {
			t.Fatal(err)
		}
		// someone else's referrer, in the tag already
		theirs := referrerOf(t, subject, "application/vnd.example.other")
		if err := remote.Write(repo.Digest(digestOf(t, theirs)), theirs); err != nil {
			t.Fatal(err)
		}
		tag := repo.Tag(strings.Replace(digestOf(t, subject), ":", "-", 1))
		reg, err := NewRegistries()
		if err != nil {
			t.Fatal(err)
		}
		ours := []v1.Image{referrerOf(t, subject, "application/spdx+json"), referrerOf(t, subject, "application/vnd.in-toto+json")}
		mu.Lock()
		requests = nil
		mu.Unlock()
		if err := reg.WriteReferrers(t.Context(), repo, ours); err != nil {
			t.Fatalf("indexes %v: %v", indexes, err)
		}
		tagPuts, tagGets := 0, 0
		for _, r := range requests {
			if strings.HasSuffix(r, "/manifests/"+tag.TagStr()) {
				if strings.HasPrefix(r, "PUT") {
					tagPuts++
				} else {
					tagGets++
				}
			}
		}
		if indexes {
			if tagPuts != 0 {
				t.Errorf("a registry with the referrers API had the tag written: %v", requests)
			}
			continue
		}
		if tagPuts != 1 || tagGets != 1 {
			t.Errorf("the referrers tag was read %d and written %d times, want once each: %v", tagGets, tagPuts, requests)
		}
		idx, err := remote.Index(tag)
		if err != nil {
			t.Fatal(err)
		}
		m, _ := idx.IndexManifest()
		var artifacts []string
		for _, d := range m.Manifests {
			artifacts = append(artifacts, d.ArtifactType)
		}
		if strings.Join(artifacts, ",") != "application/vnd.example.other,application/spdx+json,application/vnd.in-toto+json" {
			t.Errorf("the referrers tag lists %v, want the one it had and ours", artifacts)
		}
	}
}

func digestOf(t *testing.T, img v1.Image) string {
	t.Helper()
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d.String()
}

// referrerOf is an artifact manifest of one small layer whose subject is img.
func referrerOf(t *testing.T, img v1.Image, artifactType string) v1.Image {
	t.Helper()
	l, err := random.Layer(32, types.MediaType(artifactType))
	if err != nil {
		t.Fatal(err)
	}
	art, err := mutate.Append(mutate.MediaType(empty.Image, types.OCIManifestSchema1), mutate.Addendum{Layer: l})
	if err != nil {
		t.Fatal(err)
	}
	art = mutate.ConfigMediaType(art, types.MediaType(artifactType))
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	size, _ := img.Size()
	mt, _ := img.MediaType()
	return mutate.Subject(art, v1.Descriptor{MediaType: mt, Digest: d, Size: size}).(v1.Image)
}
