package cluster

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"k8s.io/client-go/rest"
)

// DefaultRequestTimeout bounds each request to the API server unless told otherwise.
const DefaultRequestTimeout = 30 * time.Second

// NoAnswer is a request the API server did not answer in time: it accepted the connection and
// said nothing. It is a timeout (errors.Is context.DeadlineExceeded).
type NoAnswer struct {
	Host  string
	After time.Duration
}

func (e *NoAnswer) Error() string {
	return fmt.Sprintf("the API server at %s did not answer within %s (--request-timeout): is the kubeconfig's server address the API server's, and is it up?", e.Host, e.After)
}

// Is makes a NoAnswer a context.DeadlineExceeded.
func (e *NoAnswer) Is(target error) bool { return target == context.DeadlineExceeded }

// WithRequestTimeout returns a copy of cfg whose every request must be answered within d: the
// response's headers for a watch (which then streams for as long as it is watched), the whole
// response for anything else. rest.Config.Timeout would cut every watch after d too. d <= 0 is no
// bound.
func WithRequestTimeout(cfg *rest.Config, d time.Duration) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	if d <= 0 {
		return cfg
	}
	wrap := cfg.WrapTransport
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		if wrap != nil {
			rt = wrap(rt)
		}
		return &boundedTransport{next: rt, timeout: d}
	}
	return cfg
}

type boundedTransport struct {
	next    http.RoundTripper
	timeout time.Duration
}

func (t *boundedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	noAnswer := &NoAnswer{Host: req.URL.Host, After: t.timeout}
	ctx, cancel := context.WithCancelCause(req.Context())
	timer := time.AfterFunc(t.timeout, func() { cancel(noAnswer) })
	resp, err := t.next.RoundTrip(req.WithContext(ctx))
	if err != nil {
		timer.Stop()
		cancel(nil)
		if context.Cause(ctx) == noAnswer {
			return nil, noAnswer
		}
		return nil, err
	}
	if req.URL.Query().Get("watch") == "true" {
		// the answer has begun: the watch streams until the caller stops it
		timer.Stop()
	}
	resp.Body = &boundedBody{ReadCloser: resp.Body, ctx: ctx, noAnswer: noAnswer, stop: func() { timer.Stop(); cancel(nil) }}
	return resp, nil
}

// boundedBody ends the request's context when the body is closed, and says why a read failed
// when the bound ended it.
type boundedBody struct {
	io.ReadCloser
	ctx      context.Context
	noAnswer *NoAnswer
	stop     func()
}

func (b *boundedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && err != io.EOF && context.Cause(b.ctx) == b.noAnswer {
		return n, b.noAnswer
	}
	return n, err
}

func (b *boundedBody) Close() error {
	b.stop()
	return b.ReadCloser.Close()
}

// withMaxInFlight wraps a transport (outside wrap's, so that a request waiting for a slot has not
// begun its request timeout) so that at most n requests are in flight at once, a watch aside: it
// streams for as long as it is watched. A request holds its slot until its response's body is
// closed, and waits for one no longer than its context lasts.
func withMaxInFlight(wrap func(http.RoundTripper) http.RoundTripper, n int) func(http.RoundTripper) http.RoundTripper {
	slots := make(chan struct{}, max(n, 1))
	return func(rt http.RoundTripper) http.RoundTripper {
		if wrap != nil {
			rt = wrap(rt)
		}
		return &inFlightTransport{next: rt, slots: slots}
	}
}

type inFlightTransport struct {
	next  http.RoundTripper
	slots chan struct{}
}

func (t *inFlightTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Query().Get("watch") == "true" {
		return t.next.RoundTrip(req)
	}
	select {
	case t.slots <- struct{}{}:
	case <-req.Context().Done():
		return nil, context.Cause(req.Context())
	}
	resp, err := t.next.RoundTrip(req)
	if err != nil {
		<-t.slots
		return nil, err
	}
	resp.Body = &releasingBody{ReadCloser: resp.Body, release: sync.OnceFunc(func() { <-t.slots })}
	return resp, nil
}

// releasingBody gives its request's slot back when it is closed.
type releasingBody struct {
	io.ReadCloser
	release func()
}

func (b *releasingBody) Close() error {
	defer b.release()
	return b.ReadCloser.Close()
}
