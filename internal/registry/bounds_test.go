package registry

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// get sends a GET through the bounded transport, with credentials for the host it is sent to,
// and reads the body whole.
func get(t *testing.T, b *boundedTransport, url string) ([]byte, error) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	req.Header.Set("Authorization", "Bearer for-the-registry")
	resp, err := b.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	return io.ReadAll(resp.Body)
}

// The credentials go with a redirect to the same host and never with one to another host; a
// redirect loop ends after MaxRedirects; HTTPS never becomes plain HTTP without --insecure.
func TestRedirects(t *testing.T) {
	var elsewhereAuth atomic.Value
	elsewhere := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		elsewhereAuth.Store(r.Header.Get("Authorization"))
		io.WriteString(w, "blob")
	}))
	defer elsewhere.Close()
	var hops atomic.Int64
	var sameAuth atomic.Value
	reg := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/loop":
			hops.Add(1)
			http.Redirect(w, r, "/loop", http.StatusFound)
		case "/away":
			http.Redirect(w, r, elsewhere.URL+"/storage", http.StatusTemporaryRedirect)
		case "/here":
			http.Redirect(w, r, "/there", http.StatusFound)
		case "/there":
			sameAuth.Store(r.Header.Get("Authorization"))
			io.WriteString(w, "ok")
		}
	}))
	defer reg.Close()
	b := &boundedTransport{next: http.DefaultTransport}

	if _, err := get(t, b, reg.URL+"/away"); err != nil {
		t.Fatal(err)
	}
	if got := elsewhereAuth.Load(); got != "" {
		t.Errorf("the registry's credentials went to another host: %q", got)
	}
	if _, err := get(t, b, reg.URL+"/here"); err != nil {
		t.Fatal(err)
	}
	if got := sameAuth.Load(); got != "Bearer for-the-registry" {
		t.Errorf("a redirect on the same host lost the credentials: %q", got)
	}

	_, err := get(t, b, reg.URL+"/loop")
	var e *Error
	if !errors.As(err, &e) || e.Kind != Hostile || !strings.Contains(err.Error(), "more than 10 times") {
		t.Errorf("a redirect loop: %v", err)
	}
	if n := hops.Load(); n != MaxRedirects+1 {
		t.Errorf("%d requests in the loop, want %d", n, MaxRedirects+1)
	}

	tlsReg := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, elsewhere.URL+"/storage", http.StatusFound)
	}))
	defer tlsReg.Close()
	client := tlsReg.Client().Transport
	_, err = get(t, &boundedTransport{next: client}, tlsReg.URL+"/v2/a/manifests/t")
	if !errors.As(err, &e) || e.Kind != Hostile || !strings.Contains(err.Error(), "from HTTPS to plain HTTP") || !strings.Contains(err.Error(), "--insecure") {
		t.Errorf("HTTPS to HTTP: %v", err)
	}
	if _, err := get(t, &boundedTransport{next: client, insecure: true}, tlsReg.URL+"/v2/a/manifests/t"); err != nil {
		t.Errorf("HTTPS to HTTP under --insecure: %v", err)
	}
}

// A manifest is read up to MaxManifestSize, whether it says its size or not; a blob whose bytes
// are not its digest fails at its end.
func TestBoundedBodies(t *testing.T) {
	blob := []byte("the layer")
	sum := sha256.Sum256(blob)
	digest := "sha256:" + hex.EncodeToString(sum[:])
	reg := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case strings.HasSuffix(r.URL.Path, "/manifests/declared"):
			w.Header().Set("Content-Length", "5000000")
			w.WriteHeader(http.StatusOK)
		case strings.HasSuffix(r.URL.Path, "/manifests/endless"):
			chunk := make([]byte, 64<<10)
			for r.Context().Err() == nil {
				if _, err := w.Write(chunk); err != nil {
					return
				}
			}
		case strings.HasSuffix(r.URL.Path, "/blobs/"+digest):
			w.Write(blob)
		case strings.Contains(r.URL.Path, "/blobs/"):
			w.Write([]byte("the forged"))
		}
	}))
	defer reg.Close()
	b := &boundedTransport{next: http.DefaultTransport}
	for _, tc := range []struct {
		path, words string
	}{
		{"/v2/a/manifests/declared", "is 5000000 bytes, more than toa-push reads (4 MiB)"},
		{"/v2/a/manifests/endless", "is longer, more than toa-push reads (4 MiB)"},
		{"/v2/a/blobs/sha256:" + strings.Repeat("0", 64), "is not what its digest says"},
	} {
		_, err := get(t, b, reg.URL+tc.path)
		if err == nil || !strings.Contains(err.Error(), tc.words) {
			t.Errorf("%s: %v", tc.path, err)
		}
	}
	if got, err := get(t, b, reg.URL+"/v2/a/blobs/"+digest); err != nil || string(got) != string(blob) {
		t.Errorf("the genuine blob: %q, %v", got, err)
	}
}
