package image

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
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
