package image

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// Registries is how toa-push talks to registries: credentials from Docker's config and credential
// helpers, and the transport that --insecure and --ca-file shape. Loopback registries speak plain
// HTTP without --insecure, as in go-containerregistry.
type Registries struct {
	insecure  bool
	transport http.RoundTripper
	keychain  authn.Keychain
	mirrors   Mirrors
	counter   *counter
}

// RegistryOption tunes Registries.
type RegistryOption func(*registryConfig)

type registryConfig struct {
	insecure  bool
	caFile    string
	keychain  authn.Keychain
	mirrors   Mirrors
	transport http.RoundTripper
}

// WithInsecure allows plain HTTP and certificates that do not verify.
func WithInsecure(insecure bool) RegistryOption {
	return func(c *registryConfig) { c.insecure = insecure }
}

// WithCAFile trusts the CA certificates in file besides the system's.
func WithCAFile(file string) RegistryOption { return func(c *registryConfig) { c.caFile = file } }

// WithKeychain replaces Docker's keychain.
func WithKeychain(k authn.Keychain) RegistryOption { return func(c *registryConfig) { c.keychain = k } }

// WithMirrors reads bases from mirrors (--mirror, TOA_MIRRORS). Only bases are read through
// them: the application's own images go where their references say.
func WithMirrors(m Mirrors) RegistryOption { return func(c *registryConfig) { c.mirrors = m } }

// WithTransport wraps the transport, to count requests in tests and benchmarks.
func WithTransport(wrap func(http.RoundTripper) http.RoundTripper) RegistryOption {
	return func(c *registryConfig) { c.transport = wrap(c.transport) }
}

// NewRegistries builds the registry access of one run.
func NewRegistries(opts ...RegistryOption) (*Registries, error) {
	cfg := &registryConfig{keychain: authn.DefaultKeychain}
	base, err := baseTransport(cfg, opts)
	if err != nil {
		return nil, err
	}
	cfg.transport = base
	for _, o := range opts {
		o(cfg) // again, so that WithTransport wraps the finished base
	}
	return &Registries{insecure: cfg.insecure, transport: cfg.transport, keychain: cfg.keychain, mirrors: cfg.mirrors}, nil
}

func baseTransport(cfg *registryConfig, opts []RegistryOption) (http.RoundTripper, error) {
	probe := &registryConfig{transport: http.DefaultTransport}
	for _, o := range opts {
		o(probe)
	}
	t := http.DefaultTransport.(*http.Transport).Clone()
	// an unreachable host must fail in seconds, not after the kernel's minutes
	t.DialContext = (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	t.TLSHandshakeTimeout = 10 * time.Second
	t.ResponseHeaderTimeout = 60 * time.Second
	t.MaxIdleConnsPerHost = 16
	if probe.caFile == "" && !probe.insecure {
		return t, nil
	}
	tlsConfig := &tls.Config{MinVersion: tls.VersionTLS12}
	if probe.caFile != "" {
		pem, err := os.ReadFile(probe.caFile)
		if err != nil {
			return nil, fmt.Errorf("read --ca-file %s: %w", probe.caFile, err)
		}
		pool, err := x509.SystemCertPool()
		if err != nil {
			pool = x509.NewCertPool()
		}
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--ca-file %s holds no PEM certificate", probe.caFile)
		}
		tlsConfig.RootCAs = pool
	}
	tlsConfig.InsecureSkipVerify = probe.insecure // the user asked for it with --insecure
	t.TLSClientConfig = tlsConfig
	return t, nil
}

// Counted returns a copy of r whose requests are counted, with the bytes they send.
func (r *Registries) Counted() *Registries {
	c := *r
	c.counter = &counter{next: r.transport}
	c.transport = c.counter
	return &c
}

// Sent returns the bytes sent in request bodies and the number of requests made through a
// Counted copy.
func (r *Registries) Sent() (bytes, requests int64) {
	if r.counter == nil {
		return 0, 0
	}
	return r.counter.bytes.Load(), r.counter.requests.Load()
}

type counter struct {
	next     http.RoundTripper
	bytes    atomic.Int64
	requests atomic.Int64
}

func (c *counter) RoundTrip(req *http.Request) (*http.Response, error) {
	c.requests.Add(1)
	if req.Body != nil && req.Body != http.NoBody {
		req.Body = &countingBody{ReadCloser: req.Body, n: &c.bytes}
	}
	return c.next.RoundTrip(req)
}

type countingBody struct {
	io.ReadCloser
	n *atomic.Int64
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n.Add(int64(n))
	return n, err
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

// Options are the go-containerregistry options of every request of this run.
func (r *Registries) Options(ctx context.Context) []remote.Option {
	return []remote.Option{
		remote.WithContext(ctx),
		remote.WithTransport(r.transport),
		remote.WithAuthFromKeychain(r.keychain),
		remote.WithRetryPredicate(retryable),
	}
}

// retryable is go-containerregistry's retry predicate without the failures that retrying only
// makes slower: a host that cannot be found or connected to (go-containerregistry retries a
// temporary DNS failure, and a dial timeout would be waited for again), and a timeout, which
// has already waited long enough. A connection that breaks in the middle of a transfer, and a
// registry's 5xx and 429 answers, are retried as before (three tries, 1 s then 3 s apart).
func retryable(err error) bool {
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
