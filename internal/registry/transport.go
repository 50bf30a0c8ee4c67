package registry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The layers under go-containerregistry's authentication, from the wire up: a stall guard on
// every request (no byte moved for the stall timeout fails it), a counter of requests and bytes,
// and retries of what can be sent again, with jittered exponential backoff that honours
// Retry-After. A blob download cut in the middle resumes where it stopped (a Range request);
// a blob upload is retried whole by the writer (upload.go), since its body is a stream.

// stalled is a transfer in which no byte moved for the stall timeout, while phase ("sending",
// "waiting for the answer", "receiving"). It counts as a timeout (exit 3) once the retries are
// spent.
func stalled(req *http.Request, limit time.Duration, phase string) *Error {
	return requestError(req, Stalled, fmt.Sprintf("no byte moved for %s while %s (%s %s on %s; --stall-timeout)",
		limit, phase, req.Method, shortPath(req.URL.Path), req.URL.Host), nil)
}

// stallOf is the stall that ended ctx, or nil.
func stallOf(ctx context.Context) *Error {
	var e *Error
	if errors.As(context.Cause(ctx), &e) && e.Kind == Stalled {
		return e
	}
	return nil
}

// shortPath keeps a registry path readable: digests cut to 12 hex digits, upload session ids
// dropped.
func shortPath(p string) string {
	if i := strings.Index(p, "/blobs/uploads/"); i >= 0 {
		return p[:i+len("/blobs/uploads/")]
	}
	if i := strings.Index(p, "sha256:"); i >= 0 && len(p) > i+7+12 {
		return p[:i+7+12]
	}
	return p
}

// stallTransport fails a request in which no byte moved for limit: while the request body waits
// to be sent, while the answer is awaited, and while the response body is read. Time spent
// producing the request body (reading a layer from another registry) or between reads of the
// response (the reader is busy) does not count: that is not this connection's stall.
type stallTransport struct {
	next  http.RoundTripper
	limit time.Duration
}

func (s *stallTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if s.limit <= 0 {
		return s.next.RoundTrip(req)
	}
	ctx, cancel := context.WithCancelCause(req.Context())
	g := &guard{limit: s.limit}
	g.fire = func(phase string) {
		cancel(stalled(req, s.limit, phase))
	}
	out := req.WithContext(ctx)
	if req.Body != nil && req.Body != http.NoBody {
		out.Body = &guardedRequestBody{ReadCloser: req.Body, g: g}
	}
	g.wait("sending")
	resp, err := s.next.RoundTrip(out)
	if err != nil {
		g.stop()
		if stall := stallOf(ctx); stall != nil {
			cancel(nil)
			return nil, stall
		}
		cancel(nil)
		return nil, err
	}
	g.answered()
	resp.Body = &guardedResponseBody{ReadCloser: resp.Body, g: g, ctx: ctx, cancel: cancel}
	return resp, nil
}

// guard is one request's stall timer: running while the connection is waited on, paused while
// this side is busy.
type guard struct {
	limit time.Duration
	fire  func(phase string)

	mu       sync.Mutex
	timer    *time.Timer
	phase    string
	done     bool
	response bool // the answer came: the request body no longer drives the timer
}

func (g *guard) wait(phase string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.done {
		return
	}
	g.phase = phase
	if g.timer == nil {
		g.timer = time.AfterFunc(g.limit, func() {
			g.mu.Lock()
			phase := g.phase
			g.mu.Unlock()
			g.fire(phase)
		})
		return
	}
	g.timer.Reset(g.limit)
}

func (g *guard) pause() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.timer != nil {
		g.timer.Stop()
	}
}

func (g *guard) answered() {
	g.mu.Lock()
	g.response = true
	g.mu.Unlock()
	g.pause()
}

func (g *guard) stop() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.done = true
	if g.timer != nil {
		g.timer.Stop()
	}
}

type guardedRequestBody struct {
	io.ReadCloser
	g *guard
}

func (b *guardedRequestBody) Read(p []byte) (int, error) {
	b.g.mu.Lock()
	answered := b.g.response
	b.g.mu.Unlock()
	if answered {
		return b.ReadCloser.Read(p)
	}
	b.g.pause() // producing the body is this side's time
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		b.g.wait("waiting for the answer")
	} else {
		b.g.wait("sending")
	}
	return n, err
}

type guardedResponseBody struct {
	io.ReadCloser
	g      *guard
	ctx    context.Context
	cancel context.CancelCauseFunc
	once   sync.Once
}

func (b *guardedResponseBody) Read(p []byte) (int, error) {
	b.g.wait("receiving")
	n, err := b.ReadCloser.Read(p)
	b.g.pause()
	if err != nil && err != io.EOF {
		if stall := stallOf(b.ctx); stall != nil {
			return n, stall
		}
	}
	return n, err
}

func (b *guardedResponseBody) Close() error {
	err := b.ReadCloser.Close()
	b.once.Do(func() {
		b.g.stop()
		b.cancel(nil)
	})
	return err
}

// counter counts the requests made and the bytes sent in their bodies, for the requests whose
// context carries it (Registries.Counted).
type counter struct {
	bytes    atomic.Int64
	requests atomic.Int64
}

type counterKey struct{}

func withCounter(ctx context.Context, c *counter) context.Context {
	if c == nil {
		return ctx
	}
	return context.WithValue(ctx, counterKey{}, c)
}

// countingTransport adds every request that reaches the wire, retries included, to the
// counters its context carries.
type countingTransport struct {
	next http.RoundTripper
}

func (t *countingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	c, _ := req.Context().Value(counterKey{}).(*counter)
	if c == nil {
		return t.next.RoundTrip(req)
	}
	c.requests.Add(1)
	if req.Body != nil && req.Body != http.NoBody {
		out := *req
		out.Body = &countingBody{ReadCloser: req.Body, n: &c.bytes}
		req = &out
	}
	return t.next.RoundTrip(req)
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

// retryPolicy is how often and how long to wait: --retries, and a first delay that doubles.
type retryPolicy struct {
	retries int           // tries after the first
	first   time.Duration // the first delay; each next one doubles, up to maxBackoff
	notify  func(string)  // told of every retry, for the user's log
}

const (
	maxBackoff    = 30 * time.Second
	maxRetryAfter = 5 * time.Minute // a registry asking for longer is not waited for
)

// delay is the wait before retry number attempt (0 for the first retry): the doubled first
// delay with full jitter between its half and itself, or what the registry asked for.
func (p retryPolicy) delay(attempt int, retryAfter time.Duration) time.Duration {
	d := p.first << min(attempt, 16)
	if d <= 0 || d > maxBackoff {
		d = maxBackoff
	}
	d = d/2 + rand.N(d/2+1)
	return max(d, retryAfter)
}

// sleep waits d, or until ctx is done.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// retryAfter reads a response's Retry-After: seconds or an HTTP date; 0 when absent.
func retryAfter(h http.Header) time.Duration {
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0
	}
	if n, err := strconv.Atoi(v); err == nil && n >= 0 {
		return time.Duration(n) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(time.Until(t), 0)
	}
	return 0
}

// retryStatus says whether a registry's answer is worth asking again: it was busy, limited the
// rate, or failed on its side.
func retryStatus(code int) bool {
	switch code {
	case http.StatusRequestTimeout, http.StatusTooManyRequests, http.StatusInternalServerError,
		http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	}
	return false
}

// later is a registry that asked to come back later than toa-push waits.
func later(host string, status int, after time.Duration) *Error {
	return &Error{Kind: Later, Host: host, Status: status, RetryAfter: after,
		Message: fmt.Sprintf("%s answered %d %s and asks to retry after %s, longer than toa-push waits (%s)", host, status,
			http.StatusText(status), after, maxRetryAfter)}
}

// retryTransport sends again a request that can be sent again (no body, or a body it can
// recreate) when the connection broke or stalled, or the registry answered 5xx or 429. A host
// never reached in this run is not retried: an unreachable registry fails in seconds. Blob
// downloads resume where a broken connection left them.
type retryTransport struct {
	next      http.RoundTripper
	policy    retryPolicy
	reachable func() bool // whether the registry answered once in this run
}

func (t *retryTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.roundTrip(req)
	if err != nil || !isBlobGet(req) || resp.StatusCode != http.StatusOK {
		return resp, err
	}
	resp.Body = &resumingBody{t: t, req: req, rc: resp.Body, size: resp.ContentLength}
	return resp, nil
}

func (t *retryTransport) roundTrip(req *http.Request) (*http.Response, error) {
	replayable := req.Body == nil || req.Body == http.NoBody || req.GetBody != nil
	for attempt := 0; ; attempt++ {
		if attempt > 0 && req.GetBody != nil {
			body, err := req.GetBody()
			if err != nil {
				return nil, err
			}
			out := *req
			out.Body = body
			req = &out
		}
		resp, err := t.next.RoundTrip(req)
		if !replayable || attempt >= t.policy.retries {
			return resp, err
		}
		var wait time.Duration
		var why string
		switch {
		case err != nil:
			if !t.retryable(err) {
				return resp, err
			}
			why = Reason(err)
		case retryStatus(resp.StatusCode):
			after := retryAfter(resp.Header)
			if after > maxRetryAfter {
				return resp, nil // the caller reports it with the registry's words
			}
			wait = after
			why = resp.Status
			io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
			resp.Body.Close()
		default:
			return resp, nil
		}
		d := t.policy.delay(attempt, wait)
		t.notify(req, why, d, attempt)
		if err := sleep(req.Context(), d); err != nil {
			return nil, err
		}
	}
}

func (t *retryTransport) retryable(err error) bool {
	if isRefused(err) {
		return t.reachable != nil && t.reachable() // a registry restarting, not one never reached
	}
	return retryable(err)
}

func (t *retryTransport) notify(req *http.Request, why string, d time.Duration, attempt int) {
	if t.policy.notify == nil {
		return
	}
	t.policy.notify(fmt.Sprintf("%s %s on %s: %s; retrying in %s (retry %d of %d)", req.Method, shortPath(req.URL.Path),
		req.URL.Host, why, d.Round(10*time.Millisecond), attempt+1, t.policy.retries))
}

// isBlobGet says whether req reads a blob, whose body can be resumed with a Range request.
func isBlobGet(req *http.Request) bool {
	return req.Method == http.MethodGet && strings.Contains(req.URL.Path, "/blobs/") &&
		!strings.Contains(req.URL.Path, "/blobs/uploads/")
}

// resumingBody is a blob's response body that asks again for the rest (Range: bytes=N-) when
// the connection breaks or stalls, as often as the retries allow.
type resumingBody struct {
	t       *retryTransport
	req     *http.Request
	rc      io.ReadCloser
	n, size int64
	tries   int
}

func (b *resumingBody) Read(p []byte) (int, error) {
	for {
		n, err := b.rc.Read(p)
		b.n += int64(n)
		if err == nil || err == io.EOF || n > 0 {
			if err != nil && err != io.EOF {
				b.pending(err)
				return n, nil
			}
			return n, err
		}
		if !b.resume(err) {
			return n, b.broken(err)
		}
	}
}

// broken is the error a download ends with once it cannot be resumed: what broke, where, and
// after how many bytes.
func (b *resumingBody) broken(err error) error {
	if !b.t.retryable(err) {
		return err
	}
	return brokenOff(b.req, "the download of "+shortPath(b.req.URL.Path), b.n, b.size, err)
}

// brokenOff is a transfer (what: "the download of /v2/shop/front/blobs/sha256:0123456789ab")
// whose connection broke or stalled in the middle after n of size bytes (size -1 when unknown),
// as often as the retries allowed. A stall counts as a timeout (exit 3); a broken connection as a
// failure.
func brokenOff(req *http.Request, what string, n, size int64, err error) *Error {
	of := ""
	if size > 0 {
		of = fmt.Sprintf(" of %d", size)
	}
	host := req.URL.Host
	var stall *Error
	if errors.As(err, &stall) && stall.Kind == Stalled {
		return requestError(req, Broken, fmt.Sprintf("%s from %s stalled after %d bytes%s: %s", what, host, n, of, stall.Error()), err)
	}
	return requestError(req, Broken, fmt.Sprintf("%s from %s broke off mid-transfer after %d bytes%s (%s)", what, host, n, of, lastWords(err)), err)
}

// pending keeps a failure that came with bytes for the next Read, which then resumes.
func (b *resumingBody) pending(err error) {
	b.rc = &failedBody{rc: b.rc, err: err}
}

type failedBody struct {
	rc  io.ReadCloser
	err error
}

func (f *failedBody) Read([]byte) (int, error) { return 0, f.err }
func (f *failedBody) Close() error             { return f.rc.Close() }

// resume asks for the rest of the blob after a broken read, and reports whether it has it.
func (b *resumingBody) resume(cause error) bool {
	if b.tries >= b.t.policy.retries || !b.t.retryable(cause) || b.req.Context().Err() != nil {
		return false
	}
	b.rc.Close()
	d := b.t.policy.delay(b.tries, 0)
	b.t.notify(b.req, fmt.Sprintf("the download broke after %d bytes (%s)", b.n, Reason(cause)), d, b.tries)
	b.tries++
	if sleep(b.req.Context(), d) != nil {
		return false
	}
	req := b.req.Clone(b.req.Context())
	req.Header.Set("Range", fmt.Sprintf("bytes=%d-", b.n))
	resp, err := b.t.roundTrip(req)
	if err != nil {
		b.rc = &failedBody{rc: io.NopCloser(strings.NewReader("")), err: err}
		return true // the next Read returns it, or resumes again
	}
	switch {
	case resp.StatusCode == http.StatusPartialContent && strings.HasPrefix(resp.Header.Get("Content-Range"), fmt.Sprintf("bytes %d-", b.n)):
		b.rc = resp.Body
	case resp.StatusCode == http.StatusOK: // no ranges here: read again from the start
		if _, err := io.CopyN(io.Discard, resp.Body, b.n); err != nil {
			resp.Body.Close()
			b.rc = &failedBody{rc: io.NopCloser(strings.NewReader("")), err: err}
			return true
		}
		b.rc = resp.Body
	default:
		resp.Body.Close()
		b.rc = &failedBody{rc: io.NopCloser(strings.NewReader("")), err: fmt.Errorf("resume the download: %s", resp.Status)}
	}
	return true
}

func (b *resumingBody) Close() error { return b.rc.Close() }
