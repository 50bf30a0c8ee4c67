package layer

import (
	"context"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// With a lockfile, npm takes what its cache holds without asking the npm registry: an install
// runs with the registry out of reach once an earlier one filled the cache, in seconds. Without
// the cache, the error names the registry npm could not reach, in seconds too.
func TestDependenciesFromTheCacheAlone(t *testing.T) {
	npmTest(t)
	upstream, err := exec.Command("npm", "config", "get", "registry").Output()
	if err != nil {
		t.Fatal(err)
	}
	target, err := url.Parse(strings.TrimSpace(string(upstream)))
	if err != nil {
		t.Fatal(err)
	}
	// a registry of our own in front of the runner's, that the test can take away
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	proxy := &httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) { r.SetURL(target) }}
	server := &http.Server{Handler: proxy}
	go server.Serve(l)
	registry := "http://" + l.Addr().String() + "/"

	c := fixture(t, "plain")
	root := t.TempDir()
	opts := []Option{WithCacheDir(root), WithRegistry(registry, "")}
	first, err := Dependencies(context.Background(), c, amd64, opts...)
	if err != nil {
		t.Fatal(err)
	}
	server.Close()
	os.RemoveAll(filepath.Join(root, "layers")) // npm must run again: only its own cache is left

	start := time.Now()
	again, err := Dependencies(context.Background(), c, amd64, opts...)
	if err != nil {
		t.Fatalf("with the npm registry gone and the cache filled: %v", err)
	}
	took := time.Since(start)
	d1, _ := first.Digest()
	d2, _ := again.Digest()
	if d1 != d2 {
		t.Errorf("another layer from the cache: %s, %s", d1, d2)
	}
	t.Logf("npm ci from its cache alone: %s", took.Round(time.Millisecond))
	if took > 30*time.Second {
		t.Errorf("took %s: npm asked the registry before its cache", took)
	}

	start = time.Now()
	_, err = Dependencies(context.Background(), c, amd64, WithCacheDir(t.TempDir()), WithRegistry(registry, ""))
	took = time.Since(start)
	if err == nil || !strings.Contains(err.Error(), "npm cannot reach the npm registry "+strings.TrimSuffix(registry, "/")) {
		t.Fatalf("with neither the registry nor the cache: %v", err)
	}
	t.Logf("npm without its registry and an empty cache, %s: %v", took.Round(time.Millisecond), err)
	if took > 30*time.Second {
		t.Errorf("took %s to say the registry is out of reach", took)
	}
}

func TestUnreachable(t *testing.T) {
	out := `npm error code ECONNREFUSED
npm error syscall connect
npm error errno ECONNREFUSED
npm error FetchError: request to http://127.0.0.1:4999/is-number failed, reason: connect ECONNREFUSED 127.0.0.1:4999
`
	got := unreachable(out)
	if !strings.HasPrefix(got, "npm cannot reach the npm registry http://127.0.0.1:4999 (connect ECONNREFUSED 127.0.0.1:4999), needed to fetch http://127.0.0.1:4999/is-number:") {
		t.Errorf("%s", got)
	}
	if got := unreachable("npm error code ENOTCACHED\n"); !strings.Contains(got, "offline") {
		t.Errorf("%s", got)
	}
	if got := unreachable("npm error code E404\n"); got != "" {
		t.Errorf("a 404 is no unreachable registry: %s", got)
	}
}

func TestRetryWaitsLeftToTheUser(t *testing.T) {
	r := &Runner{}
	t.Setenv("npm_config_userconfig", filepath.Join(t.TempDir(), "none"))
	t.Setenv("npm_config_globalconfig", filepath.Join(t.TempDir(), "none"))
	if got := strings.Join(retryArgs(r, ""), " "); got != "--fetch-retry-mintimeout=1000 --fetch-retry-maxtimeout=5000" {
		t.Errorf("%s", got)
	}
	if got := strings.Join(retryArgs(r, "registry=x\nfetch-retry-maxtimeout = 90000\n"), " "); got != "--fetch-retry-mintimeout=1000" {
		t.Errorf("an .npmrc that sets it: %s", got)
	}
	t.Setenv("NPM_CONFIG_FETCH_RETRY_MINTIMEOUT", "20000")
	if got := retryArgs(r, "fetch-retry-maxtimeout=90000"); len(got) != 0 {
		t.Errorf("the environment sets it: %v", got)
	}
}
