package harness

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Faulty is a real registry (Distribution, as Registry starts it) behind a proxy that breaks the
// requests a test chooses, the way networks and registries break: a connection cut in the middle
// of a body, a transfer that stops moving, an answer 5xx or 429 with Retry-After, a registry
// that restarts. Every request through the proxy is recorded.
type Faulty struct {
	Addr string // the proxy's "127.0.0.1:PORT": what the test talks to
	*Recorder

	bin, dir string
	quit     chan struct{} // closed at the end of the test: stalled requests give up

	mu       sync.Mutex
	backend  string // the registry's own address; it changes when the registry restarts
	stop     func()
	server   *http.Server
	upstream *http.Transport
	faults   []*Injected
	restarts int
}

// Kind is how a request is broken.
type Kind int

const (
	// CutRequest reads After bytes of the request's body, then cuts the connection.
	CutRequest Kind = iota + 1
	// StallRequest reads After bytes of the request's body, then nothing more.
	StallRequest
	// CutResponse sends the registry's headers and After bytes of its body, then cuts the
	// connection.
	CutResponse
	// StallResponse sends the registry's headers and After bytes of its body, then nothing more.
	StallResponse
	// Answer answers Status (with RetryAfter, if set) instead of the registry.
	Answer
	// Restart cuts the connection and restarts the registry on its storage: while it starts,
	// connections to the proxy are refused.
	Restart
	// NoMount passes a mount request (POST ?mount=&from=) on without asking for the mount, as a
	// registry that does not mount across repositories answers: it opens an upload (202).
	NoMount
)

// Fault is what to break: the requests Match selects (all when nil), Times of them (all when 0).
type Fault struct {
	Match      func(*http.Request) bool
	Times      int
	Kind       Kind
	After      int64  // bytes passed before a cut or a stall
	Status     int    // of an Answer
	Code       string // of an Answer: the registry's error code; UNAVAILABLE, or TOOMANYREQUESTS for 429, by default
	RetryAfter string // of an Answer, e.g. "2"
}

// Injected is a fault in place; Hits says how many requests it broke.
type Injected struct {
	Fault
	hits atomic.Int64
}

// Hits is how many requests the fault broke so far.
func (i *Injected) Hits() int { return int(i.hits.Load()) }

// quiet drops the proxy's own complaints about the connections the faults cut.
var quiet = log.New(io.Discard, "", 0)

// Request matchers for faults.

// BlobUpload matches a request that carries a blob's bytes: a PUT or PATCH of an upload.
func BlobUpload(r *http.Request) bool {
	return (r.Method == http.MethodPut || r.Method == http.MethodPatch) && strings.Contains(r.URL.Path, "/blobs/uploads/") && r.ContentLength != 0
}

// UploadStart matches the POST that opens an upload (or asks for a mount).
func UploadStart(r *http.Request) bool {
	return r.Method == http.MethodPost && strings.Contains(r.URL.Path, "/blobs/uploads/")
}

// BlobDownload matches a request that reads a blob.
func BlobDownload(r *http.Request) bool {
	return r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/blobs/sha256:")
}

// ManifestPut matches a request that writes a manifest or an index.
func ManifestPut(r *http.Request) bool {
	return r.Method == http.MethodPut && strings.Contains(r.URL.Path, "/manifests/")
}

// Mount matches a request for a cross-repository mount.
func Mount(r *http.Request) bool { return UploadStart(r) && r.URL.Query().Get("mount") != "" }

// Ping matches GET /v2/, how a client first asks a registry how to talk to it.
func Ping(r *http.Request) bool { return r.Method == http.MethodGet && r.URL.Path == "/v2/" }

// FaultyRegistry starts a registry behind a fault-injecting proxy; both stop at the end of the
// test. With no fault injected, the proxy passes everything through.
func FaultyRegistry(t testing.TB) *Faulty {
	t.Helper()
	bin := registryBinary(t)
	var err error
	f := &Faulty{Recorder: &Recorder{}, bin: bin, dir: t.TempDir(), quit: make(chan struct{}), upstream: &http.Transport{}}
	f.backend, f.stop, err = startRegistryProcess(bin, f.dir)
	if err != nil {
		t.Fatalf("start the registry: %v", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		f.stop()
		t.Fatal(err)
	}
	f.Addr = l.Addr().String()
	f.serve(l)
	t.Cleanup(func() {
		close(f.quit)
		f.mu.Lock()
		server, stop := f.server, f.stop
		f.mu.Unlock()
		server.Close()
		stop()
		if t.Failed() {
			if s := registryLogTail(filepath.Join(f.dir, "registry.log"), 4000); s != "" {
				t.Logf("registry %s log:\n%s", f.Addr, s)
			}
		}
	})
	return f
}

func (f *Faulty) serve(l net.Listener) {
	server := &http.Server{ErrorLog: quiet, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.Recorder.serve(http.HandlerFunc(f.handle), w, r)
	})}
	f.mu.Lock()
	f.server = server
	f.mu.Unlock()
	go server.Serve(l)
}

// Inject puts a fault in place, before the ones injected earlier are tried.
func (f *Faulty) Inject(fault Fault) *Injected {
	i := &Injected{Fault: fault}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.faults = append([]*Injected{i}, f.faults...)
	return i
}

// Heal removes every fault: the proxy passes everything through again.
func (f *Faulty) Heal() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.faults = nil
}

// Restarts is how often the registry was restarted.
func (f *Faulty) Restarts() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.restarts
}

// take returns the fault that breaks r, counting it, or nil.
func (f *Faulty) take(r *http.Request) *Injected {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, i := range f.faults {
		if i.Match != nil && !i.Match(r) {
			continue
		}
		if i.Times > 0 && i.Hits() >= i.Times {
			continue
		}
		i.hits.Add(1)
		return i
	}
	return nil
}

func (f *Faulty) handle(w http.ResponseWriter, r *http.Request) {
	fault := f.take(r)
	if fault == nil {
		f.proxy().ServeHTTP(w, r)
		return
	}
	if (fault.Kind == CutRequest || fault.Kind == StallRequest) && r.ContentLength >= 0 && r.ContentLength <= fault.After {
		fault.hits.Add(-1) // a body too short to be broken after After bytes: not this fault's
		f.proxy().ServeHTTP(w, r)
		return
	}
	switch fault.Kind {
	case CutRequest:
		io.CopyN(io.Discard, r.Body, fault.After)
		r.Body.Close()
		cut(w)
	case StallRequest:
		io.CopyN(io.Discard, r.Body, fault.After)
		f.hold(r)
		r.Body.Close()
		cut(w)
	case CutResponse, StallResponse:
		f.partial(w, r, fault)
	case Answer:
		io.Copy(io.Discard, io.LimitReader(r.Body, 1<<20))
		r.Body.Close()
		if fault.RetryAfter != "" {
			w.Header().Set("Retry-After", fault.RetryAfter)
		}
		code := fault.Code
		switch {
		case code != "":
		case fault.Status == http.StatusTooManyRequests:
			code = "TOOMANYREQUESTS"
		default:
			code = "UNAVAILABLE"
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(fault.Status)
		fmt.Fprintf(w, `{"errors":[{"code":%q,"message":"injected by the test's proxy"}]}`, code)
	case Restart:
		r.Body.Close()
		cut(w)
		f.Restart()
	case NoMount:
		out := r.Clone(r.Context()) // the recorder keeps the request as it came
		q := out.URL.Query()
		q.Del("mount")
		q.Del("from")
		out.URL.RawQuery = q.Encode()
		f.proxy().ServeHTTP(w, out)
	}
}

// proxy passes a request to the registry as it is now (registryProxy), through its transport.
func (f *Faulty) proxy() *httputil.ReverseProxy {
	f.mu.Lock()
	backend, upstream := f.backend, f.upstream
	f.mu.Unlock()
	p := registryProxy(backend)
	p.Transport, p.ErrorLog = upstream, quiet
	return p
}

// partial sends the registry's answer up to fault.After bytes of its body, then cuts the
// connection or holds it.
func (f *Faulty) partial(w http.ResponseWriter, r *http.Request, fault *Injected) {
	f.mu.Lock()
	backend, upstream := f.backend, f.upstream
	f.mu.Unlock()
	out := r.Clone(r.Context())
	out.URL.Scheme, out.URL.Host, out.RequestURI = "http", backend, ""
	resp, err := upstream.RoundTrip(out)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	if resp.ContentLength >= 0 && resp.ContentLength <= fault.After {
		fault.hits.Add(-1) // too short to be broken after After bytes: not this fault's
		w.WriteHeader(resp.StatusCode)
		io.Copy(w, resp.Body)
		return
	}
	w.WriteHeader(resp.StatusCode)
	io.CopyN(w, resp.Body, fault.After)
	http.NewResponseController(w).Flush()
	if fault.Kind == StallResponse {
		f.hold(r)
	}
	cut(w)
}

// hold keeps a request open without moving a byte until the client goes away, the test ends, or
// two minutes pass.
func (f *Faulty) hold(r *http.Request) {
	select {
	case <-r.Context().Done():
	case <-f.quit:
	case <-time.After(2 * time.Minute):
	}
}

// cut closes the client's connection at once (a reset, not an orderly close).
func cut(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return
	}
	if tcp, ok := conn.(*net.TCPConn); ok {
		tcp.SetLinger(0)
	}
	conn.Close()
}

// Restart stops the registry and the proxy (every connection is cut, and new ones are refused
// while the registry starts), starts the registry again on its storage, and listens again on
// the same address.
func (f *Faulty) Restart() {
	f.mu.Lock()
	server, stop, upstream := f.server, f.stop, f.upstream
	f.mu.Unlock()
	server.Close()
	stop()
	upstream.CloseIdleConnections()
	backend, stop, err := startRegistryProcess(f.bin, f.dir)
	if err != nil {
		panic(fmt.Sprintf("restart the registry: %v", err)) // the test cannot go on
	}
	var l net.Listener
	for range 50 { // the old listener's port is free again at once, but give it a moment
		if l, err = net.Listen("tcp", f.Addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		stop()
		panic(fmt.Sprintf("listen on %s again: %v", f.Addr, err))
	}
	f.mu.Lock()
	f.backend, f.stop, f.upstream = backend, stop, &http.Transport{}
	f.restarts++
	f.mu.Unlock()
	f.serve(l)
}

// Blobs lists the digests of the blobs in the registry's storage.
func (f *Faulty) Blobs() map[string]bool {
	return storedBlobs(filepath.Join(f.dir, "storage"))
}

func storedBlobs(storage string) map[string]bool {
	out := map[string]bool{}
	root := filepath.Join(storage, "docker", "registry", "v2", "blobs", "sha256")
	filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && d.Name() == "data" {
			out["sha256:"+filepath.Base(filepath.Dir(path))] = true
		}
		return nil
	})
	return out
}

// Complete checks every tag of every repository of the registry at addr: the manifests it points
// to, their configs and layers are all there. A push that failed half-way must leave no tag on
// an image with missing blobs.
func Complete(ctx context.Context, addr string) error {
	reg, err := name.NewRegistry(addr, name.Insecure)
	if err != nil {
		return err
	}
	repos, err := remote.Catalog(ctx, reg)
	if err != nil {
		return fmt.Errorf("list the repositories of %s: %w", addr, err)
	}
	var errs []error
	for _, repo := range repos {
		r := reg.Repo(repo)
		tags, err := remote.List(r, remote.WithContext(ctx))
		var terr *transport.Error
		if errors.As(err, &terr) && terr.StatusCode == http.StatusNotFound {
			continue // blobs were sent there, and no tag yet
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("list the tags of %s: %w", r, err))
			continue
		}
		for _, tag := range tags {
			if err := complete(ctx, r.Tag(tag)); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", r.Tag(tag), err))
			}
		}
	}
	return errors.Join(errs...)
}

func complete(ctx context.Context, ref name.Reference) error {
	desc, err := remote.Get(ref, remote.WithContext(ctx))
	if err != nil {
		return err
	}
	if !desc.MediaType.IsIndex() {
		img, err := desc.Image()
		if err != nil {
			return err
		}
		return imageComplete(ctx, ref.Context(), img)
	}
	idx, err := desc.ImageIndex()
	if err != nil {
		return err
	}
	m, err := idx.IndexManifest()
	if err != nil {
		return err
	}
	for _, d := range m.Manifests {
		child := ref.Context().Digest(d.Digest.String())
		if err := complete(ctx, child); err != nil {
			return fmt.Errorf("%s: %w", d.Digest, err)
		}
	}
	return nil
}

func imageComplete(ctx context.Context, repo name.Repository, img v1.Image) error {
	m, err := img.Manifest()
	if err != nil {
		return err
	}
	for _, d := range append([]v1.Descriptor{m.Config}, m.Layers...) {
		u := fmt.Sprintf("http://%s/v2/%s/blobs/%s", repo.RegistryStr(), repo.RepositoryStr(), d.Digest)
		req, _ := http.NewRequestWithContext(ctx, http.MethodHead, u, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("the blob %s is missing (%s)", d.Digest, resp.Status)
		}
	}
	return nil
}

// PushLayeredBase pushes a base of two platforms (linux/amd64, linux/arm64), each of three random
// layers of 512 KiB, as <addr>/bases/random:test, and returns that reference: for the tests
// that need layers big enough to move and break, not a node that runs (PushRandomBase's are a
// few hundred bytes). Its digests differ on every call.
func PushLayeredBase(t testing.TB, addr string) string {
	t.Helper()
	var adds []mutate.IndexAddendum
	for _, p := range []v1.Platform{{OS: "linux", Architecture: "amd64"}, {OS: "linux", Architecture: "arm64", Variant: "v8"}} {
		img, err := random.Image(512<<10, 3)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		cfg = cfg.DeepCopy()
		cfg.OS, cfg.Architecture, cfg.Variant = p.OS, p.Architecture, p.Variant
		if img, err = mutate.ConfigFile(img, cfg); err != nil {
			t.Fatal(err)
		}
		adds = append(adds, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &p}})
	}
	idx := mutate.AppendManifests(mutate.IndexMediaType(empty.Index, types.OCIImageIndex), adds...)
	ref := addr + "/bases/random:test"
	if err := remote.WriteIndex(baseRef(t, ref), idx, remote.WithContext(t.Context())); err != nil {
		t.Fatalf("push the random base %s: %v", ref, err)
	}
	return ref
}
