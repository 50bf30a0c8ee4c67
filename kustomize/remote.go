package kustomize

import (
	"fmt"
	"io"
	"net/http"
	"sync"
)

// MaxRemoteSize is the most toa-apply reads of a remote resource a kustomization names (a URL in
// `resources:`), as of a local file (MaxFileSize).
const MaxRemoteSize = MaxFileSize

var boundRemoteOnce sync.Once

// boundRemote bounds what kustomize fetches over HTTP. Its loader fetches a remote resource with a
// new http.Client{} (Go's default transport, at most 10 redirects) and reads the whole body, with
// no bound and no way to pass a client of ours: an endless body filled toa-apply's memory in a
// second. So the process's default transport is wrapped, once: a body declared or read beyond
// MaxRemoteSize is an error that names the URL. toa-apply's own requests to the API server go
// through client-go's transports, not this one. The time is Render's (--timeout).
func boundRemote() {
	boundRemoteOnce.Do(func() {
		http.DefaultTransport = &boundedTransport{next: http.DefaultTransport, limit: MaxRemoteSize}
	})
}

type boundedTransport struct {
	next  http.RoundTripper
	limit int64
}

func (t *boundedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	url := req.URL.Redacted()
	if resp.ContentLength > t.limit {
		resp.Body.Close()
		return nil, tooLargeRemote(url, t.limit)
	}
	resp.Body = &boundedBody{ReadCloser: resp.Body, left: t.limit, url: url}
	return resp, nil
}

// boundedBody fails once more than its bound is read.
type boundedBody struct {
	io.ReadCloser
	left int64
	url  string
}

func (b *boundedBody) Read(p []byte) (int, error) {
	if b.left < 0 {
		return 0, tooLargeRemote(b.url, MaxRemoteSize)
	}
	if int64(len(p)) > b.left+1 {
		p = p[:b.left+1]
	}
	n, err := b.ReadCloser.Read(p)
	b.left -= int64(n)
	if b.left < 0 {
		return n, tooLargeRemote(b.url, MaxRemoteSize)
	}
	return n, err
}

func tooLargeRemote(url string, limit int64) error {
	return fmt.Errorf("%s is larger than the %d MiB toa-apply reads of a remote resource", url, limit>>20)
}
