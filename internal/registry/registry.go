// Package registry is the client of OCI registries, toa-push's and toa-apply's (its oci://REF
// pull, through artifact/), and knows nothing of Toa: the
// transport (a stall timeout on every transfer, retries with backoff and Retry-After, resumed
// downloads, one ping and one login per registry in a run), credentials from Docker's config and
// its helpers, mirrors for reading bases, and the writing half (blobs sent once and mounted
// everywhere else, remembered across runs, the tag last). It is a room of its own because it is
// half of what image/ was, and it is tested without a Toa application: image/ keeps the plan,
// the build and the outputs, and asks this package for the bytes. It imports nothing of ours but
// fault, fsys and internal/keychain, so that toa-apply may link it without the push chain.
package registry

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"

	"github.com/toa-deploy/toa-deploy/internal/fsys"
	"github.com/toa-deploy/toa-deploy/internal/keychain"
)

// Registries is how toa-push talks to registries in one run: credentials from Docker's config
// and credential helpers, the transport that --insecure and --ca-file shape, a stall timeout on
// every transfer and retries with backoff. Each registry is pinged once and gets one
// authenticated transport for the whole run, whatever repositories are read or written; what
// the run learns of which repository holds which blob is kept per registry, so that a blob is
// sent once and mounted everywhere else. Plain HTTP is used for loopback registries, and
// elsewhere only with --insecure.
type Registries struct {
	insecure bool
	program  string // who reads, in the user agent and the words of a refusal: toa-push, toa-apply
	creds    credentials
	mirrors  Mirrors
	wire     http.RoundTripper // the connection pool, under the stall guard and the counter
	policy   retryPolicy
	memory   string // where the blobs written are remembered across runs; "" for nowhere
	run      *run   // shared by Counted copies
	counter  *counter
}

// run is what a run's Registries and their Counted copies share: a client per registry.
type run struct {
	mu      sync.Mutex
	clients map[string]*client
}

// RegistryOption tunes Registries.
type RegistryOption func(*registryConfig)

type registryConfig struct {
	insecure  bool
	caFile    string
	keychain  authn.Keychain
	custom    bool
	mirrors   Mirrors
	wrap      []func(http.RoundTripper) http.RoundTripper
	stall     time.Duration
	retries   int
	backoff   time.Duration
	notify    func(string)
	memoryDir string
	program   string
}

// Defaults of the transfer bounds (--stall-timeout, --retries).
const (
	DefaultStallTimeout = 60 * time.Second
	DefaultRetries      = 5
)

// WithInsecure allows plain HTTP and certificates that do not verify.
func WithInsecure(insecure bool) RegistryOption {
	return func(c *registryConfig) { c.insecure = insecure }
}

// WithCAFile trusts the CA certificates in file besides the system's.
func WithCAFile(file string) RegistryOption { return func(c *registryConfig) { c.caFile = file } }

// WithKeychain replaces Docker's keychain.
func WithKeychain(k authn.Keychain) RegistryOption {
	return func(c *registryConfig) { c.keychain, c.custom = k, true }
}

// WithMirrors reads bases from mirrors (--mirror, TOA_MIRRORS). Only bases are read through
// them: the application's own images go where their references say.
func WithMirrors(m Mirrors) RegistryOption { return func(c *registryConfig) { c.mirrors = m } }

// WithTransport wraps the connection pool, to count or disturb requests in tests and
// benchmarks.
func WithTransport(wrap func(http.RoundTripper) http.RoundTripper) RegistryOption {
	return func(c *registryConfig) { c.wrap = append(c.wrap, wrap) }
}

// WithStallTimeout fails a transfer in which no byte moved for d (--stall-timeout); it is then
// retried. 0 turns the guard off.
func WithStallTimeout(d time.Duration) RegistryOption { return func(c *registryConfig) { c.stall = d } }

// WithRetries is how often a failed request or blob transfer is tried again (--retries): after
// a broken or stalled connection, or a registry's 5xx or 429.
func WithRetries(n int) RegistryOption { return func(c *registryConfig) { c.retries = n } }

// WithBackoff is the wait before the first retry; each next one doubles (with jitter) up to 30 s,
// or is what the registry's Retry-After asks. Default 1 s.
func WithBackoff(d time.Duration) RegistryOption { return func(c *registryConfig) { c.backoff = d } }

// WithNotify is told of every retry, in a line for the user's log.
func WithNotify(f func(string)) RegistryOption { return func(c *registryConfig) { c.notify = f } }

// WithMemory keeps, under dir, which repository of each registry holds which blob this run
// wrote, so that a later run mounts them instead of sending them again.
func WithMemory(dir string) RegistryOption { return func(c *registryConfig) { c.memoryDir = dir } }

// WithProgram names the command that reads, in the User-Agent and in the words of what it
// refuses ("more than toa-apply reads"); toa-push by default.
func WithProgram(name string) RegistryOption { return func(c *registryConfig) { c.program = name } }

// NewRegistries builds the registry access of one run.
func NewRegistries(opts ...RegistryOption) (*Registries, error) {
	cfg := &registryConfig{keychain: keychain.Default, stall: DefaultStallTimeout, retries: DefaultRetries, backoff: time.Second, program: "toa-push"}
	for _, o := range opts {
		o(cfg)
	}
	if cfg.retries < 0 {
		return nil, fmt.Errorf("--retries is %d: give 0 or more", cfg.retries)
	}
	if cfg.stall < 0 {
		return nil, fmt.Errorf("--stall-timeout is %s: give a positive duration, like 60s", cfg.stall)
	}
	pool, err := connectionPool(cfg)
	if err != nil {
		return nil, err
	}
	var wire http.RoundTripper = pool
	for _, w := range cfg.wrap {
		wire = w(wire)
	}
	wire = &countingTransport{next: &stallTransport{next: wire, limit: cfg.stall}}
	return &Registries{
		insecure: cfg.insecure,
		program:  cfg.program,
		creds:    credentials{keychain: cfg.keychain, custom: cfg.custom},
		mirrors:  cfg.mirrors,
		wire:     wire,
		policy:   retryPolicy{retries: cfg.retries, first: cfg.backoff, notify: cfg.notify},
		memory:   cfg.memoryDir,
		run:      &run{clients: map[string]*client{}},
	}, nil
}

// connectionPool is the run's one http.Transport: an unreachable host fails in seconds, not
// after the kernel's minutes; the stall guard bounds everything after the connection.
func connectionPool(cfg *registryConfig) (*http.Transport, error) {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.DialContext = (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	t.TLSHandshakeTimeout = 10 * time.Second
	t.MaxIdleConnsPerHost = 16
	if cfg.caFile == "" && !cfg.insecure {
		return t, nil
	}
	tlsConfig := &tls.Config{MinVersion: tls.VersionTLS12}
	if cfg.caFile != "" {
		pem, err := fsys.ReadFile(cfg.caFile, fsys.MaxPackageSize) // a FIFO or a device is refused, not waited on
		if err != nil {
			return nil, fmt.Errorf("read --ca-file %s: %w", cfg.caFile, err)
		}
		pool, err := x509.SystemCertPool()
		if err != nil {
			pool = x509.NewCertPool()
		}
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--ca-file %s holds no PEM certificate", cfg.caFile)
		}
		tlsConfig.RootCAs = pool
	}
	tlsConfig.InsecureSkipVerify = cfg.insecure // the user asked for it with --insecure
	t.TLSClientConfig = tlsConfig
	return t, nil
}

// Counted returns a copy of r whose requests are counted, with the bytes they send. It shares
// r's registries: no second ping, no second login.
func (r *Registries) Counted() *Registries {
	c := *r
	c.counter = &counter{}
	return &c
}

// Sent returns the bytes sent in request bodies and the number of requests made through a
// Counted copy, retries included.
func (r *Registries) Sent() (bytes, requests int64) {
	if r.counter == nil {
		return 0, 0
	}
	return r.counter.bytes.Load(), r.counter.requests.Load()
}

// Reference parses an image reference, allowing plain HTTP under --insecure.
func (r *Registries) Reference(s string) (name.Reference, error) {
	var opts []name.Option
	if r.insecure {
		opts = append(opts, name.Insecure)
	}
	ref, err := name.ParseReference(s, opts...)
	if err != nil {
		return nil, fmt.Errorf("'%s' is not an image reference: %w", s, err)
	}
	return ref, nil
}

// Source returns where a base is read from: through the mirror that matches it, or from ref
// itself (nil mirror).
func (r *Registries) Source(ref string) (string, *Mirror, error) {
	return r.mirrors.Redirect(ref)
}

// client is one registry in a run: pinged once, logged into once, and what the run knows of
// its blobs.
type client struct {
	host string
	reg  name.Registry

	mu        sync.Mutex // held while connecting
	connected bool
	err       error // a failure to connect that is not the caller's context's

	scheme    string            // "https", or "http" where plain HTTP is allowed and spoken
	transport http.RoundTripper // authenticated; a transport.Wrapper, which go-containerregistry does not wrap again
	found     found             // the credentials and where they came from
	reached   atomic.Bool
	noMount   atomic.Bool // the registry answered a mount with an upload: it does not mount
	mountSeen atomic.Bool // a mount was answered: whether the registry mounts is known
	mountTry  sync.Mutex  // held by the first mount, so that a registry that does not mount is asked once
	blobs     *blobIndex
	slots     chan struct{} // blob transfers at once
	// written are the manifests this run put by digest ("repo@sha256:..."): an index written by
	// its digest and then under its tag does not put its images' manifests again
	written sync.Map
	// referrersAPI is what the registry was seen to do with a referrer: referrersUnknown,
	// referrersIndexed or referrersTagged
	referrersAPI atomic.Int32
}

// client returns the registry's client, connecting it the first time: one ping, one login.
func (r *Registries) client(ctx context.Context, repo name.Repository) (*client, error) {
	r.run.mu.Lock()
	c := r.run.clients[repo.RegistryStr()]
	if c == nil {
		c = &client{host: repo.RegistryStr(), reg: repo.Registry, slots: make(chan struct{}, 6)}
		r.run.clients[c.host] = c
	}
	r.run.mu.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.connected {
		return c, nil
	}
	if c.err != nil {
		return nil, c.err
	}
	err := c.connect(ctx, r, repo)
	if err != nil {
		if ctx.Err() == nil {
			c.err = err // the same answer for every image; the caller's own deadline is not kept
		}
		return nil, err
	}
	c.connected = true
	return c, nil
}

// connect pings the registry, finds how it wants to be spoken to (HTTPS, or plain HTTP where
// that is allowed), and logs in with the credentials Docker's config gives for it.
func (c *client) connect(ctx context.Context, r *Registries, repo name.Repository) error {
	f, err := r.creds.resolve(ctx, repo)
	if err != nil {
		return err
	}
	c.found = f
	retrying := &retryTransport{next: r.wire, policy: r.policy, reachable: c.reached.Load}
	gated := &plainHTTPGate{next: retrying, host: c.host, allowed: r.insecure || isLoopback(c.host)}
	challenge, err := transport.Ping(ctx, c.reg, gated)
	if err != nil {
		return connectError(c.host, err, r.insecure)
	}
	c.reached.Store(true)
	c.scheme = "https"
	if challenge.Insecure {
		c.scheme = "http"
	}
	bounds := &boundedTransport{next: gated, insecure: r.insecure, program: r.program}
	inner := transport.NewUserAgent(&schemeTransport{next: bounds, host: c.host, scheme: c.scheme}, r.program)
	token := &transport.Token{}
	if strings.EqualFold(challenge.Scheme, "bearer") {
		token, err = transport.Exchange(ctx, c.reg, f.auth, inner, []string{repo.Scope(transport.PullScope)}, challenge)
		if err != nil {
			return c.explain(err)
		}
	}
	c.transport, err = transport.FromToken(c.reg, f.auth, inner, challenge, token)
	if err != nil {
		return err
	}
	c.blobs = loadBlobIndex(r.memory, c.host)
	return nil
}

// explain turns a registry's 401 or 403 into the message that says whose credentials it
// refused, or that there were none.
func (c *client) explain(err error) error {
	var terr *transport.Error
	if err == nil || !errors.As(err, &terr) || (terr.StatusCode != http.StatusUnauthorized && terr.StatusCode != http.StatusForbidden) {
		return err
	}
	if hasKind(err, Credentials) {
		return err
	}
	return refusedCredentials(c.host, terr.StatusCode, c.found.source, c.found.looked, err)
}

// isLoopback says whether host is this machine: localhost, 127.0.0.0/8 or ::1, with any port.
func isLoopback(host string) bool {
	h := host
	if hp, _, err := net.SplitHostPort(host); err == nil {
		h = hp
	}
	if h == "localhost" {
		return true
	}
	ip := net.ParseIP(strings.Trim(h, "[]"))
	return ip != nil && ip.IsLoopback()
}

// plainHTTPGate refuses plain HTTP to a registry where it is not allowed: go-containerregistry
// would also fall back to it for private addresses (10.0.0.0/8, ...), where a man in the middle
// could read the credentials.
type plainHTTPGate struct {
	next    http.RoundTripper
	host    string
	allowed bool
}

// errPlainHTTP is a plain HTTP request the gate refused.
var errPlainHTTP = errors.New("plain HTTP is not allowed for this registry")

func (g *plainHTTPGate) RoundTrip(req *http.Request) (*http.Response, error) {
	if !g.allowed && req.URL.Scheme == "http" && req.URL.Host == g.host {
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, errPlainHTTP
	}
	return g.next.RoundTrip(req)
}

// schemeTransport sends every request to the registry with the scheme its ping settled on,
// whatever scheme the reference suggested (go-containerregistry guesses plain HTTP for
// loopback registries, which may speak TLS).
type schemeTransport struct {
	next   http.RoundTripper
	host   string
	scheme string
}

func (s *schemeTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Host == s.host && req.URL.Scheme != s.scheme {
		out := *req
		u := *req.URL
		u.Scheme = s.scheme
		out.URL = &u
		req = &out
	}
	return s.next.RoundTrip(req)
}

// options are go-containerregistry's options for reading ref: the registry's one transport, and
// the context with this copy's counter.
func (r *Registries) options(ctx context.Context, ref name.Reference) ([]remote.Option, *client, error) {
	c, err := r.client(ctx, ref.Context())
	if err != nil {
		return nil, nil, err
	}
	return []remote.Option{remote.WithContext(withCounter(ctx, r.counter)), remote.WithTransport(c.transport)}, c, nil
}

// Get reads ref's manifest or index.
func (r *Registries) Get(ctx context.Context, ref name.Reference) (*remote.Descriptor, error) {
	opts, c, err := r.options(ctx, ref)
	if err != nil {
		return nil, err
	}
	desc, err := remote.Get(ref, opts...)
	return desc, c.explain(err)
}

// Head asks for ref's descriptor with one HEAD.
func (r *Registries) Head(ctx context.Context, ref name.Reference) (*v1.Descriptor, error) {
	opts, c, err := r.options(ctx, ref)
	if err != nil {
		return nil, err
	}
	desc, err := remote.Head(ref, opts...)
	return desc, c.explain(err)
}

// Image reads ref's image; its layers stay in the registry until they are read.
func (r *Registries) Image(ctx context.Context, ref name.Reference) (v1.Image, error) {
	opts, c, err := r.options(ctx, ref)
	if err != nil {
		return nil, err
	}
	img, err := remote.Image(ref, opts...)
	if err != nil {
		return nil, c.explain(err)
	}
	return boundedImage(img, ref.String()), nil
}

// Layer reads the blob ref names, as a layer: its bytes stay in the registry until they are
// read, and are checked against its digest at their end (bounds.go).
func (r *Registries) Layer(ctx context.Context, ref name.Digest) (v1.Layer, error) {
	opts, c, err := r.options(ctx, ref)
	if err != nil {
		return nil, err
	}
	l, err := remote.Layer(ref, opts...)
	return l, c.explain(err)
}

// Index reads ref's index; its images stay in the registry until they are read.
func (r *Registries) Index(ctx context.Context, ref name.Reference) (v1.ImageIndex, error) {
	opts, c, err := r.options(ctx, ref)
	if err != nil {
		return nil, err
	}
	idx, err := remote.Index(ref, opts...)
	if err != nil {
		return nil, c.explain(err)
	}
	return &boundedIndex{idx: idx, what: ref.Context().String()}, nil
}

// retryable is go-containerregistry's retry predicate without the failures that retrying only
// makes slower: a host that cannot be found or connected to (go-containerregistry retries a
// temporary DNS failure, and a dial timeout would be waited for again), and a timeout, which
// has already waited long enough. A connection that breaks or stalls in the middle of a
// transfer is retried.
func retryable(err error) bool {
	if hasKind(err, Stalled) {
		return true
	}
	if err == nil || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return false
	}
	var op *net.OpError
	var dns *net.DNSError
	var timeout interface{ Timeout() bool }
	switch {
	case errors.As(err, &op) && op.Op == "dial", errors.As(err, &dns):
		return false
	case errors.As(err, &timeout) && timeout.Timeout():
		return false
	}
	if t, ok := err.(interface{ Temporary() bool }); ok && t.Temporary() {
		return true
	}
	return errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, net.ErrClosed)
}

// isRefused says whether the connection was refused: nothing listens there (now).
func isRefused(err error) bool {
	return errors.Is(err, syscall.ECONNREFUSED)
}

// WriteImage pushes one image manifest and its blobs under ref with go-containerregistry's
// remote.Write: a referrer by its digest (on a registry without the referrers API,
// go-containerregistry keeps the subject's referrers tag, sha256-<hex>, up to date), or a
// signature image under its tag.
func (r *Registries) WriteImage(ctx context.Context, ref name.Reference, img v1.Image) error {
	opts, c, err := r.options(ctx, ref)
	if err != nil {
		return err
	}
	return c.explain(remote.Write(ref, img, opts...))
}
