package image

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"

	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
)

// reason says in a few words why a registry request failed: the host that could not be found or
// reached, or what the registry answered, instead of the raw chain of Go errors.
func reason(err error) string {
	var dns *net.DNSError
	var op *net.OpError
	var terr *transport.Error
	switch {
	case errors.As(err, &dns):
		return fmt.Sprintf("cannot find the host %s (%s)", dns.Name, dns.Err)
	case errors.As(err, &op) && op.Addr != nil:
		return fmt.Sprintf("cannot connect to %s: %v", op.Addr, op.Err)
	case errors.Is(err, context.DeadlineExceeded):
		return "no answer in time"
	case errors.As(err, &terr):
		return registryAnswer(terr)
	}
	return err.Error()
}

func registryAnswer(e *transport.Error) string {
	status := fmt.Sprintf("%d %s", e.StatusCode, http.StatusText(e.StatusCode))
	var codes []string
	for _, d := range e.Errors {
		codes = append(codes, string(d.Code))
	}
	switch e.StatusCode {
	case http.StatusUnauthorized, http.StatusForbidden:
		return "the registry refused our credentials (" + status + "): log in with `docker login` or configure a credential helper"
	case http.StatusNotFound:
		return "not found (" + status + ")"
	}
	if len(codes) > 0 {
		return status + ": " + strings.Join(codes, ", ")
	}
	return status
}

// RegistryError is a registry request that failed: what was asked for (an image, a base and the
// mirror it is read from), why, in a few words that name the host, and what it was needed for.
type RegistryError struct {
	What string // "the base ghcr.io/toa-io/runtime:1.0.0 from the mirror ..."
	Err  error
	Need string // "to resolve the base of composition-front"
}

func (e *RegistryError) Error() string {
	s := e.What + ": " + reason(e.Err)
	if e.Need != "" {
		s += " (needed " + e.Need + ")"
	}
	return s
}

func (e *RegistryError) Unwrap() error { return e.Err }
