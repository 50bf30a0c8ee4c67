package harness

import (
	"bytes"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// registryInstall is what a test that finds no registry binary is told to run.
const registryInstall = "run `bash testdata/registry/install.sh` (Debian's docker-registry package, " +
	"Distribution 2.8), or `make test`, which runs it"

// Registry starts a Distribution 2.8 registry (`docker-registry serve`) on 127.0.0.1 with a free
// port and storage in a temporary folder, waits until it answers `GET /v2/`, and returns its
// address "127.0.0.1:PORT". It stops at the end of the test. Loopback registries are plain HTTP
// (go-containerregistry's name package treats 127.0.0.1 so), without authentication.
// Under `go test -short` (the tests that need nothing but Go) the test is skipped.
func Registry(t testing.TB) string {
	t.Helper()
	return startIn(t, registryBinary(t), t.TempDir())
}

// registryBinary is Distribution's binary; under `go test -short` the test is skipped.
func registryBinary(t testing.TB) string {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: this test needs a real registry")
	}
	bin, err := exec.LookPath("docker-registry")
	if err != nil {
		t.Fatalf("no docker-registry binary on PATH: %s", registryInstall)
	}
	return bin
}

// startIn starts a registry with its configuration, storage and log under dir (see
// startRegistryProcess), stopped at the end of the test, and returns its address.
func startIn(t testing.TB, bin, dir string) string {
	t.Helper()
	var last error
	// The free port is found by listening and closing, so another process may take it before
	// the registry does: try a few ports.
	for range 3 {
		addr, err := startRegistry(t, bin, dir)
		if err == nil {
			return addr
		}
		last = err
	}
	t.Fatalf("start the registry: %v", last)
	return ""
}

// startRegistry starts one registry with its storage and log under dir and waits for it. On
// success the test's cleanup stops it; on failure it is already stopped.
func startRegistry(t testing.TB, bin, dir string) (string, error) {
	addr, stop, err := startRegistryProcess(bin, dir)
	if err != nil {
		return "", err
	}
	logPath := filepath.Join(dir, "registry.log")
	t.Cleanup(func() {
		stop()
		if t.Failed() {
			if s := registryLogTail(logPath, 4000); s != "" {
				t.Logf("registry %s log:\n%s", addr, s)
			}
		}
	})
	return addr, nil
}

// startRegistryProcess starts one registry on a free port with its storage and log under dir
// (the storage of an earlier one there is kept), waits for it, and returns its address and how
// to stop it. On failure it is already stopped.
func startRegistryProcess(bin, dir string) (string, func(), error) {
	addr, err := freeLoopbackAddr()
	if err != nil {
		return "", nil, err
	}
	secret := make([]byte, 16)
	if _, err := rand.Read(secret); err != nil {
		return "", nil, err
	}
	storage := filepath.Join(dir, "storage")
	if err := os.MkdirAll(storage, 0o755); err != nil {
		return "", nil, err
	}
	config := filepath.Join(dir, "config.yml")
	// Distribution's own defaults, but for what a test needs: loopback, temporary storage,
	// deletes allowed, no background purge of uploads, quiet logs.
	yml := fmt.Sprintf(`version: 0.1
log:
  level: warn
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: %s
  delete:
    enabled: true
  cache:
    blobdescriptor: inmemory
  maintenance:
    uploadpurging:
      enabled: false
http:
  addr: %s
  secret: %s
`, storage, addr, hex.EncodeToString(secret))
	scheme := "http"
	if cert := filepath.Join(dir, "tls.crt"); fileExists(cert) { // TLSRegistry put a certificate there
		yml += fmt.Sprintf("  tls:\n    certificate: %s\n    key: %s\n", cert, filepath.Join(dir, "tls.key"))
		scheme = "https"
	}
	if htpasswd := filepath.Join(dir, "htpasswd"); fileExists(htpasswd) { // AuthRegistry put its users there
		yml += fmt.Sprintf("auth:\n  htpasswd:\n    realm: toa-test\n    path: %s\n", htpasswd)
	}
	if err := os.WriteFile(config, []byte(yml), 0o644); err != nil {
		return "", nil, err
	}
	logPath := filepath.Join(dir, "registry.log")
	log, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return "", nil, err
	}
	defer log.Close()

	cmd := exec.Command(bin, "serve", config)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // never outlive the test binary
	if err := cmd.Start(); err != nil {
		return "", nil, fmt.Errorf("%s serve: %w", bin, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-exited:
			case <-time.After(5 * time.Second):
				_ = cmd.Process.Kill()
				<-exited
			}
		})
	}

	if err := waitForRegistry(scheme, addr, exited); err != nil {
		stop()
		return "", nil, fmt.Errorf("%w; its log (%s):\n%s", err, logPath, registryLogTail(logPath, 2000))
	}
	return addr, stop, nil
}

// freeLoopbackAddr returns a 127.0.0.1 address whose port was free a moment ago.
func freeLoopbackAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// waitForRegistry polls GET /v2/ until it answers 200 (or 401), the process exits, or 30 s pass.
func waitForRegistry(scheme, addr string, exited <-chan error) error {
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} // is it up, not whom to trust
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := client.Get(scheme + "://" + addr + "/v2/")
		if err == nil {
			resp.Body.Close()
			// 401: it is up and asks for credentials (AuthRegistry's).
			if resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusUnauthorized {
				return nil
			}
			err = fmt.Errorf("GET /v2/: %s", resp.Status)
		}
		select {
		case werr := <-exited:
			return fmt.Errorf("registry on %s exited before it answered: %v", addr, werr)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("registry on %s did not answer in 30s: %v", addr, err)
		}
	}
}

// registryLogTail returns up to the last n bytes of a file.
func registryLogTail(path string, n int64) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	if int64(len(b)) > n {
		b = b[int64(len(b))-n:]
	}
	return string(bytes.TrimSpace(b))
}

// RegistryWithLog starts a registry as Registry does and puts a reverse proxy in front of it
// that records every request. It returns the proxy's address "127.0.0.1:PORT", which is what
// the test talks to, and the Recorder.
func RegistryWithLog(t testing.TB) (string, *Recorder) {
	t.Helper()
	backend := Registry(t)
	rec := &Recorder{}
	proxy := registryProxy(backend)
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		rec.serve(proxy, w, req)
	}))
	t.Cleanup(server.Close)
	return strings.TrimPrefix(server.URL, "http://"), rec
}

// registryProxy passes requests to the registry at backend ("127.0.0.1:PORT"), keeping the Host
// the client used: Distribution writes it into the upload Locations it returns, and the client
// must come back through the proxy.
func registryProxy(backend string) *httputil.ReverseProxy {
	target := &url.URL{Scheme: "http", Host: backend}
	return &httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) {
		r.SetURL(target)
		r.Out.Host = r.In.Host
	}}
}

// Request is one request a Recorder saw, with the status of its response.
type Request struct {
	Method string
	Path   string // the URL path, e.g. /v2/app/blobs/uploads/<uuid>
	Query  string // the raw query, e.g. digest=sha256:... or mount=sha256:...&from=base
	// Bytes is the size of the request body as sent (a chunk of a blob, a manifest).
	Bytes int64
	// Status is the response's status code; ResponseBytes the size of its body.
	Status        int
	ResponseBytes int64
}

// IsBlobUpload says whether the request completes a blob upload carrying the blob's bytes:
// the PUT that closes an upload session, or a monolithic POST with ?digest=. A cross-repository
// mount (POST ?mount=) is not an upload; see IsMount.
func (r Request) IsBlobUpload() bool {
	if !strings.Contains(r.Path, "/blobs/uploads/") {
		return false
	}
	switch r.Method {
	case http.MethodPut:
		return true
	case http.MethodPost:
		q, _ := url.ParseQuery(r.Query)
		return q.Get("digest") != "" && q.Get("mount") == ""
	}
	return false
}

// IsMount says whether the request asks for a cross-repository blob mount (POST ?mount=&from=).
// Status 201 means the registry mounted the blob; 202 means it opened an upload instead.
func (r Request) IsMount() bool {
	if r.Method != http.MethodPost || !strings.Contains(r.Path, "/blobs/uploads/") {
		return false
	}
	q, _ := url.ParseQuery(r.Query)
	return q.Get("mount") != ""
}

// IsManifestPut says whether the request writes a manifest or an index (PUT .../manifests/<ref>).
func (r Request) IsManifestPut() bool {
	return r.Method == http.MethodPut && strings.Contains(r.Path, "/manifests/")
}

// IsBlobGet says whether the request reads a blob (GET .../blobs/<digest>): what a push costs
// the registry it reads a base from.
func (r Request) IsBlobGet() bool {
	return r.Method == http.MethodGet && strings.Contains(r.Path, "/blobs/") &&
		!strings.Contains(r.Path, "/blobs/uploads/")
}

// Recorder records the requests that pass through the proxy of RegistryWithLog. It is safe for
// concurrent use.
type Recorder struct {
	mu       sync.Mutex
	requests []Request
}

// Reset forgets every request recorded so far, e.g. after a test's setup pushed its base.
func (r *Recorder) Reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.requests = nil
}

// Snapshot returns a Recorder that holds what r holds now, and records nothing more: what a
// step saw, before the next step (a reader's requests, say) adds to it.
func (r *Recorder) Snapshot() *Recorder {
	return &Recorder{requests: r.Requests()}
}

// Requests returns a copy of the requests recorded since the start or the last Reset, in the
// order their responses were finished.
func (r *Recorder) Requests() []Request {
	return r.Filter(func(Request) bool { return true })
}

// Filter returns the recorded requests for which keep is true.
func (r *Recorder) Filter(keep func(Request) bool) []Request {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []Request
	for _, q := range r.requests {
		if keep(q) {
			out = append(out, q)
		}
	}
	return out
}

// BytesSent is the sum of the request bodies recorded: what clients sent to the registry.
func (r *Recorder) BytesSent() int64 {
	var n int64
	for _, q := range r.Requests() {
		n += q.Bytes
	}
	return n
}

// BlobUploads returns the requests that completed a blob upload (see Request.IsBlobUpload).
// A push that uploads nothing has none.
func (r *Recorder) BlobUploads() []Request { return r.Filter(Request.IsBlobUpload) }

// Mounts returns the cross-repository mount requests (see Request.IsMount).
func (r *Recorder) Mounts() []Request { return r.Filter(Request.IsMount) }

// ManifestPuts returns the requests that wrote a manifest or an index.
func (r *Recorder) ManifestPuts() []Request { return r.Filter(Request.IsManifestPut) }

// Heads returns the HEAD requests (of manifests and blobs): how a client probes a registry.
func (r *Recorder) Heads() []Request {
	return r.Filter(func(q Request) bool { return q.Method == http.MethodHead })
}

// BlobGets returns the requests that read a blob.
func (r *Recorder) BlobGets() []Request { return r.Filter(Request.IsBlobGet) }

// serve passes one request to the proxy and records it once the body was sent and the
// response written.
func (r *Recorder) serve(proxy http.Handler, w http.ResponseWriter, req *http.Request) {
	body := &countingBody{ReadCloser: req.Body, done: make(chan struct{})}
	counted := req.ContentLength != 0 // the proxy drops an empty body without closing it
	if counted {
		req.Body = body
	}
	cw := &countingWriter{ResponseWriter: w, status: http.StatusOK}
	proxy.ServeHTTP(cw, req)
	if counted {
		// The transport may still be sending the body when the response has come.
		select {
		case <-body.done:
		case <-time.After(5 * time.Second): // the registry answered without reading it all
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.requests = append(r.requests, Request{
		Method:        req.Method,
		Path:          req.URL.Path,
		Query:         req.URL.RawQuery,
		Bytes:         body.n(),
		Status:        cw.status,
		ResponseBytes: cw.bytes,
	})
}

// countingBody counts the bytes read from a request body and says when it was read to its
// end or closed.
type countingBody struct {
	io.ReadCloser
	mu    sync.Mutex
	count int64
	once  sync.Once
	done  chan struct{}
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.mu.Lock()
	b.count += int64(n)
	b.mu.Unlock()
	if err != nil {
		b.once.Do(func() { close(b.done) })
	}
	return n, err
}

func (b *countingBody) Close() error {
	b.once.Do(func() { close(b.done) })
	return b.ReadCloser.Close()
}

func (b *countingBody) n() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.count
}

// countingWriter keeps a response's status and counts its body.
type countingWriter struct {
	http.ResponseWriter
	status  int
	bytes   int64
	written bool
}

func (w *countingWriter) WriteHeader(code int) {
	if !w.written && code >= 200 { // 1xx responses come before the real one
		w.status, w.written = code, true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *countingWriter) Write(p []byte) (int, error) {
	w.written = true
	n, err := w.ResponseWriter.Write(p)
	w.bytes += int64(n)
	return n, err
}

// Unwrap lets http.ResponseController (which the proxy flushes through) reach the real writer.
func (w *countingWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func fileExists(path string) bool {
	info, err := os.Stat(path)
	return err == nil && !info.IsDir()
}

// CompletedUploads are the digests of the blob uploads the registry completed, how many times
// each, and the bytes they carried.
func (r *Recorder) CompletedUploads() (count map[string]int, bytes int64) {
	count = map[string]int{}
	for _, req := range r.BlobUploads() {
		q, _ := url.ParseQuery(req.Query)
		if req.Status == http.StatusCreated {
			count[q.Get("digest")]++
			bytes += req.Bytes
		}
	}
	return count, bytes
}

// Pings are how many times a client asked the registry's /v2/.
func (r *Recorder) Pings() int {
	return len(r.Filter(func(req Request) bool { return req.Method == http.MethodGet && req.Path == "/v2/" }))
}
