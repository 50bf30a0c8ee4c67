package kustomize

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/toa-deploy/toa-deploy/internal/fault"
)

// countingTransport counts the requests of the client a test passes in.
type countingTransport struct{ n atomic.Int32 }

func (c *countingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return http.DefaultTransport.RoundTrip(req)
}

// A kustomization's remote resources are fetched with the client Render is given, their bodies
// bounded, and the process's default transport is left as it was.
func TestRemoteResources(t *testing.T) {
	configMap := "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: remote}\ndata: {a: b}\n"
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/objects.yaml":
			w.Write([]byte(configMap))
		case "/moved.yaml":
			http.Redirect(w, r, "/objects.yaml", http.StatusFound)
		case "/loop.yaml":
			http.Redirect(w, r, "/loop.yaml", http.StatusFound)
		case "/large.yaml":
			w.Header().Set("Content-Length", "100000000")
			w.Write(bytes.Repeat([]byte("# large\n"), 1000))
		case "/endless.yaml":
			chunk := bytes.Repeat([]byte("# endless\n"), 6554)
			for r.Context().Err() == nil {
				if _, err := w.Write(chunk); err != nil {
					return
				}
			}
		default:
			http.NotFound(w, r)
		}
	}))
	defer server.Close()
	before := http.DefaultTransport
	for _, tc := range []struct {
		name, resource string
		want           string // an error's words; "" renders the ConfigMap
	}{
		{"a file", "/objects.yaml", ""},
		{"a redirect", "/moved.yaml", ""},
		{"endless redirects", "/loop.yaml", "more than 10 redirects"},
		{"a declared length over the bound", "/large.yaml", "/large.yaml is larger than the 64 MiB toa-apply reads of a remote resource"},
		{"an endless body", "/endless.yaml", "/endless.yaml is larger than the 64 MiB toa-apply reads of a remote resource"},
		{"not found", "/missing.yaml", "/missing.yaml: status code 404"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			k := "resources:\n- local.yaml\n- " + server.URL + tc.resource + "\n"
			os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k), 0o644)
			os.WriteFile(filepath.Join(dir, "local.yaml"), []byte("apiVersion: v1\nkind: Secret\nmetadata: {name: local}\n"), 0o644)
			transport := &countingTransport{}
			objects, err := Render(context.Background(), OnDisk(), dir, WithHTTPClient(&http.Client{Transport: transport,
				CheckRedirect: RemoteClient().CheckRedirect}))
			if n := transport.n.Load(); n == 0 {
				t.Errorf("the client passed in made no request")
			} else if tc.resource == "/objects.yaml" && n != 1 {
				t.Errorf("the resource was fetched %d times", n)
			}
			if http.DefaultTransport != before {
				t.Errorf("http.DefaultTransport was changed")
			}
			if tc.want != "" {
				if !fault.IsInput(err) || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("got %v, want an input error that says %q", err, tc.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, o := range objects {
				names = append(names, o.GetKind()+"/"+o.GetName())
			}
			if strings.Join(names, ",") != "Secret/local,ConfigMap/remote" {
				t.Errorf("rendered %v", names)
			}
			if entries, _ := os.ReadDir(dir); len(entries) != 2 {
				t.Errorf("the render wrote into the user's folder: %d entries", len(entries))
			}
		})
	}
}

func TestIsGitRepository(t *testing.T) {
	for url, want := range map[string]bool{
		"https://github.com/org/repo//deploy?ref=v1":       true,
		"https://dev.azure.com/org/proj/_git/repo/deploy":  true,
		"https://example.com/org/repo.git/deploy?ref=main": true,
		"https://example.com/objects.yaml":                 false,
		"http://127.0.0.1:8080/a/b/objects.yaml":           false,
	} {
		if got := isGitRepository(url); got != want {
			t.Errorf("isGitRepository(%s) = %v, want %v", url, got, want)
		}
	}
}
