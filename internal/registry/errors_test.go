package registry

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/remote/transport"

	"github.com/toa-deploy/toa-deploy/internal/fault"
)

// Only a registry that gave no answer is out of reach; one that answered no is not.
func TestOutOfReach(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"connection refused", &net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}, true},
		{"deadline", fmt.Errorf("resolve: %w", context.DeadlineExceeded), true},
		{"503", &transport.Error{StatusCode: http.StatusServiceUnavailable}, true},
		{"429", &transport.Error{StatusCode: http.StatusTooManyRequests}, true},
		{"404", &transport.Error{StatusCode: http.StatusNotFound}, false},
		{"401", refusedCredentials("r", 401, "", "", &transport.Error{StatusCode: 401}), false},
		{"a format not taken", errors.New("is a Docker schema 1 image"), false},
	} {
		if got := OutOfReach(tc.err); got != tc.want {
			t.Errorf("%s: OutOfReach = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestRetryable(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{&net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}, false},
		{&net.OpError{Op: "dial", Net: "tcp", Err: &timeoutErr{}}, false},
		{&net.OpError{Op: "dial", Net: "tcp", Err: &net.DNSError{Name: "ghcr.io", Err: "server misbehaving", IsTemporary: true}}, false},
		{&net.DNSError{Name: "ghcr.io", IsTemporary: true}, false},
		{&net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}, true},
		{timeoutErr{}, false}, // a TLS handshake or a response that timed out has waited long enough
		{errors.New("unexpected"), false},
		{&transport.Error{StatusCode: 503}, true},
		{&transport.Error{StatusCode: 404}, false},
		{context.DeadlineExceeded, false},
	} {
		if got := retryable(c.err); got != c.want {
			t.Errorf("retryable(%v) = %v", c.err, got)
		}
	}
}

type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }

// One error type says the request, the answer and the class: a stall (or a broken download that
// stalled) exits 3, anything else a registry does exits 1; Wrap keeps what its cause says.
func TestErrorCarriesTheRequest(t *testing.T) {
	req, _ := http.NewRequest(http.MethodGet, "https://user:secret@r.example/v2/a/blobs/sha256:ab?_state=tok", nil)
	stall := stalled(req, time.Second, "receiving")
	answer := &transport.Error{StatusCode: 503, Request: req, Errors: []transport.Diagnostic{{Code: transport.UnavailableErrorCode}}}
	for _, tc := range []struct {
		name   string
		err    error
		class  fault.Class
		status int
		out    bool
	}{
		{"stall", stall, fault.ClassTimeout, 0, true},
		{"broken by a stall", brokenOff(req, "the download of x", 10, 100, stall), fault.ClassTimeout, 0, true},
		{"503", Wrap("the base b", "to plan", answer), fault.ClassFailed, 503, true},
		{"refused credentials", Wrap("push p", "", refusedCredentials("r.example", 401, "", "looked in F", &transport.Error{StatusCode: 401, Request: req})), fault.ClassFailed, 401, false},
		{"later", later("r.example", 429, time.Hour), fault.ClassFailed, 429, true},
	} {
		var e *Error
		if !errors.As(tc.err, &e) {
			t.Fatalf("%s: not an Error: %v", tc.name, tc.err)
		}
		if got := fault.ClassOf(tc.err); got != tc.class {
			t.Errorf("%s: class %d, want %d", tc.name, got, tc.class)
		}
		if e.Status != tc.status || OutOfReach(tc.err) != tc.out {
			t.Errorf("%s: status %d out of reach %v", tc.name, e.Status, OutOfReach(tc.err))
		}
		if e.URL != "" && e.URL != "https://r.example/v2/a/blobs/sha256:ab" {
			t.Errorf("%s: the URL keeps credentials or the query: %s", tc.name, e.URL)
		}
		if strings.Contains(tc.err.Error(), "secret") || strings.Contains(tc.err.Error(), "tok") {
			t.Errorf("%s: the message shows credentials: %v", tc.name, tc.err)
		}
	}
	if w := Wrap("the base b", "to plan", answer).(*Error); w.Method != "GET" || len(w.Diagnostics) != 1 {
		t.Errorf("the request or the diagnostics are lost: %+v", w)
	}
}
