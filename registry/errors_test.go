package registry

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"syscall"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
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
		{"401", &AccessError{Host: "r", Status: 401, Err: &transport.Error{StatusCode: 401}}, false},
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
