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
	"syscall"

	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
)

// Reason says in a few words why a registry request failed: the host that could not be found or
// reached, a connection that broke or stalled mid-transfer, whose credentials were refused, or
// what the registry answered, instead of the raw chain of Go errors.
func Reason(err error) string {
	var (
		broken  *BrokenError
		stall   *StallError
		connect *ConnectError
		access  *AccessError
		after   *RetryAfterError
		corrupt *CorruptBlobError
		dns     *net.DNSError
		op      *net.OpError
		terr    *transport.Error
	)
	switch {
	case errors.As(err, &broken):
		return broken.Error()
	case errors.As(err, &stall):
		return stall.Error()
	case errors.As(err, &connect):
		return connect.Error()
	case errors.As(err, &access):
		return access.Error()
	case errors.As(err, &after):
		return after.Error()
	case errors.As(err, &corrupt):
		return corrupt.Error()
	case errors.As(err, &dns):
		return fmt.Sprintf("cannot find the host %s (%s)", dns.Name, dns.Err)
	case errors.As(err, &op) && op.Op == "dial" && op.Addr != nil:
		return fmt.Sprintf("cannot connect to %s: %v", op.Addr, op.Err)
	case errors.As(err, &op) && op.Addr != nil:
		return fmt.Sprintf("the connection to %s broke mid-transfer (%s: %s)", op.Addr, op.Op, lastWords(op.Err))
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return "the connection broke mid-transfer (" + lastWords(err) + ")"
	case errors.Is(err, io.EOF):
		return "the registry closed the connection without an answer"
	case errors.Is(err, context.DeadlineExceeded):
		return "no answer in time"
	case errors.As(err, &terr):
		return registryAnswer(terr)
	}
	return err.Error()
}

// lastWords is the innermost message of an error chain: "unexpected EOF" rather than the URL
// and the method before it.
func lastWords(err error) string {
	for {
		next := errors.Unwrap(err)
		if next == nil {
			return err.Error()
		}
		err = next
	}
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
	s := e.What + ": " + Reason(e.Err)
	if e.Need != "" {
		s += " (needed " + e.Need + ")"
	}
	return s
}

func (e *RegistryError) Unwrap() error { return e.Err }

// ConnectError is a registry that could not be spoken to, with what to do about it: a TLS
// certificate that does not verify, plain HTTP where HTTPS was expected.
type ConnectError struct {
	Host    string
	Message string
	Hint    string
	Err     error
}

func (e *ConnectError) Error() string {
	if e.Hint == "" {
		return e.Message
	}
	return e.Message + ": " + e.Hint
}

func (e *ConnectError) Unwrap() error { return e.Err }

// OutOfReach says whether err is a registry that gave no answer about what was asked: it could
// not be reached or spoken to, did not answer in time, or answered that it is unavailable (5xx,
// 429). A registry that answered no (not found, credentials refused, a format toa-push does not
// take) is not out of reach: what it said holds, and a plan must not be made around it.
func OutOfReach(err error) bool {
	var terr *transport.Error
	if errors.As(err, &terr) {
		return retryStatus(terr.StatusCode)
	}
	var (
		access *AccessError
		conn   *ConnectError
		nerr   net.Error
	)
	if errors.As(err, &access) {
		return false
	}
	// net.Error covers a refused or reset connection too: syscall.Errno is one
	return errors.As(err, &conn) || errors.As(err, &nerr) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, io.ErrUnexpectedEOF)
}

// connectError says why the ping of host failed. go-containerregistry tries HTTPS and, where
// plain HTTP is allowed, HTTP too; the TLS failure is the one that tells the user what is
// wrong, not the HTTP attempt's "400 Bad Request" from a TLS server.
func connectError(host string, err error, insecure bool) error {
	var (
		unknown  x509.UnknownAuthorityError
		hostname x509.HostnameError
		invalid  x509.CertificateInvalidError
		verify   *tls.CertificateVerificationError
		record   tls.RecordHeaderError
	)
	switch {
	case errors.As(err, &unknown), errors.As(err, &hostname), errors.As(err, &invalid), errors.As(err, &verify):
		return &ConnectError{Host: host, Err: err,
			Message: fmt.Sprintf("the TLS certificate of %s does not verify (%s)", host, tlsWords(err)),
			Hint:    "pass --ca-file FILE with the certificate of the CA that signed it, or --insecure to skip the check"}
	case errors.As(err, &record) || errors.Is(err, errPlainHTTP) || strings.Contains(err.Error(), "server gave HTTP response to HTTPS client"):
		if insecure || isLoopback(host) {
			break
		}
		return &ConnectError{Host: host, Err: err,
			Message: fmt.Sprintf("%s does not speak HTTPS (it answered the TLS handshake in plain HTTP)", host),
			Hint:    "if it is a plain HTTP registry, pass --insecure to allow plain HTTP for it"}
	}
	return &ConnectError{Host: host, Err: err, Message: Reason(withoutPlainHTTP(err))}
}

// tlsWords is the certificate error alone, without the URL and method around it.
func tlsWords(err error) string {
	var (
		unknown  x509.UnknownAuthorityError
		hostname x509.HostnameError
		invalid  x509.CertificateInvalidError
	)
	switch {
	case errors.As(err, &unknown):
		return unknown.Error()
	case errors.As(err, &hostname):
		return hostname.Error()
	case errors.As(err, &invalid):
		return invalid.Error()
	}
	return lastWords(err)
}

// withoutPlainHTTP is the ping's error without the plain HTTP attempt the gate refused, which
// says nothing about the registry.
func withoutPlainHTTP(err error) error {
	var many interface{ Unwrap() []error }
	if !errors.As(err, &many) {
		return err
	}
	for _, e := range many.Unwrap() {
		if !errors.Is(e, errPlainHTTP) {
			return e
		}
	}
	return err
}

// CorruptBlobError is a blob whose bytes are not what its digest says: a cached layer damaged
// on disk, or a registry that answered DIGEST_INVALID.
type CorruptBlobError struct {
	Digest  string
	File    string // the cache file it was read from, "" when it is not one
	Got     string // the digest of what was read, "" when the registry said so
	Evicted bool   // the file was removed from the cache
}

func (e *CorruptBlobError) Error() string {
	what := "the blob " + e.Digest
	if e.File != "" {
		what = "the cached layer " + e.File
	}
	s := what + " is damaged"
	if e.Got != "" {
		s += fmt.Sprintf(" (its bytes have the digest %s)", e.Got)
	} else {
		s += " (the registry answered DIGEST_INVALID)"
	}
	switch {
	case e.Evicted:
		return s + ": it was removed from the cache; run toa-push again to build it anew"
	case e.File != "":
		return s + ": remove it and run toa-push again to build it anew"
	}
	return s
}
