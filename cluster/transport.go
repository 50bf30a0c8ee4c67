package cluster

import (
	"context"
	"fmt"
	"io"
	"net/http"
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
