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
	"net/url"
	"strings"
	"syscall"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/remote/transport"

	"github.com/toa-deploy/toa-deploy/internal/fault"
)

// Reason says in a few words why a registry request failed: the host that could not be found or
// reached, a connection that broke or stalled mid-transfer, whose credentials were refused, or
// what the registry answered, instead of the raw chain of Go errors.
func Reason(err error) string {
	var (
		rerr *Error
		dns  *net.DNSError
		op   *net.OpError
		terr *transport.Error
	)
	switch {
	case errors.As(err, &rerr):
		return rerr.words()
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
		return &Error{Kind: Connect, Host: host, Err: err,
			Message: fmt.Sprintf("the TLS certificate of %s does not verify (%s)", host, tlsWords(err)),
			Hint:    "pass --ca-file FILE with the certificate of the CA that signed it, or --insecure to skip the check"}
	case errors.As(err, &record) || errors.Is(err, errPlainHTTP) || strings.Contains(err.Error(), "server gave HTTP response to HTTPS client"):
		if insecure || isLoopback(host) {
			break
		}
		return &Error{Kind: Connect, Host: host, Err: err,
			Message: fmt.Sprintf("%s does not speak HTTPS (it answered the TLS handshake in plain HTTP)", host),
			Hint:    "if it is a plain HTTP registry, pass --insecure to allow plain HTTP for it"}
	}
	return withRequest(&Error{Kind: Unreachable, Host: host, Err: err, Message: Reason(withoutPlainHTTP(err))}, err)
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

// Kind is what went wrong with a registry request.
type Kind int

// The kinds of Error. Answered is the zero value: the registry answered with an error status.
const (
	Answered    Kind = iota // the registry answered no: a status and its own diagnostics
	Unreachable             // it could not be found or connected to, or closed without an answer
	Connect                 // it could not be spoken to: a certificate that does not verify, plain HTTP
	Credentials             // it asked for credentials and refused the ones it got, or got none
	Stalled                 // no byte moved for the stall timeout
	Broken                  // the connection broke or stalled mid-transfer as often as the retries allow
	Later                   // it asked to come back later than toa-push waits
	Corrupt                 // a blob's bytes are not what its digest says
	Hostile                 // what it sent breaks a bound: too big, too many redirects, HTTPS to HTTP
)

// Error is every failure of a registry request, in the manner of go-containerregistry's
// transport.Error: the request (method and URL, without credentials or query), the status and the
// registry's own `errors` diagnostics where it answered, its Retry-After, and the Kind, from which
// the exit class and whether the registry is out of reach are read. What and Need, where set, say
// what was asked for and what for ("the base ghcr.io/toa-io/runtime:1.0.0", "to build the
// dependencies of front"); the rest of the message is the cause's, in a few words.
type Error struct {
	Kind        Kind
	Method      string
	URL         string
	Host        string
	Status      int                    // 0 when the registry did not answer
	Diagnostics []transport.Diagnostic // the registry's own `errors` array
	RetryAfter  time.Duration          // what the registry's Retry-After asked, 0 when it did not

	What    string // what was asked for; "" for the request itself
	Need    string // what it was needed for; may be ""
	Message string // what happened; "" to say what Err says
	Hint    string // what to do; may be ""

	Digest  string // Corrupt: the blob
	File    string // Corrupt: the cache file it was read from, "" when it is not one
	Got     string // Corrupt: the digest of what was read, "" when the registry said DIGEST_INVALID
	Evicted bool   // Corrupt: the file was removed from the cache

	Err error // the cause; may be nil
}

func (e *Error) Error() string {
	s := e.words()
	if e.What != "" {
		s = e.What + ": " + s
	}
	if e.Need != "" {
		s += " (needed " + e.Need + ")"
	}
	return s
}

// words is the message without what was asked for.
func (e *Error) words() string {
	switch {
	case e.Kind == Corrupt && e.Message == "":
		return e.corruptWords()
	case e.Message != "" && e.Hint != "":
		return e.Message + ": " + e.Hint
	case e.Message != "":
		return e.Message
	case e.Err != nil:
		return Reason(e.Err)
	}
	return e.Kind.String()
}

func (e *Error) Unwrap() error { return e.Err }

// Is makes a stall a context.DeadlineExceeded, as every timeout is.
func (e *Error) Is(target error) bool { return target == context.DeadlineExceeded && e.Kind == Stalled }

// Class is the exit class fault.ClassOf reads: a stall, or a request that ran out of time, is a
// timeout (exit 3), once the retries are spent; anything else a registry does is a failure of the
// work (exit 1), never the user's input, whatever the registry sent.
func (e *Error) Class() fault.Class {
	if errors.Is(e, context.DeadlineExceeded) {
		return fault.ClassTimeout
	}
	return fault.ClassFailed
}

func (k Kind) String() string {
	switch k {
	case Answered:
		return "the registry answered with an error"
	case Unreachable:
		return "the registry could not be reached"
	case Connect:
		return "the registry could not be spoken to"
	case Credentials:
		return "the registry refused the credentials"
	case Stalled:
		return "the transfer stalled"
	case Broken:
		return "the connection broke mid-transfer"
	case Later:
		return "the registry asks to come back later"
	case Corrupt:
		return "a blob is damaged"
	case Hostile:
		return "the registry sent what is not taken from a registry: too much, a redirect loop, HTTPS to plain HTTP"
	}
	return "registry error"
}

func (e *Error) corruptWords() string {
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

// Wrap says what a failed request asked for and what for: "the base X: <why> (needed to ...)".
// The request, status, diagnostics and kind of the cause are carried up, so that the outermost
// error says everything. It returns nil for nil.
func Wrap(what, need string, err error) error {
	if err == nil {
		return nil
	}
	var inner *Error
	if errors.As(err, &inner) {
		e := *inner // its words too: what it says of itself is said the same under what and need
		e.What, e.Need, e.Err = what, need, err
		return &e
	}
	return withRequest(&Error{Kind: kindOf(err), What: what, Need: need, Err: err}, err)
}

// withRequest fills in what go-containerregistry's transport.Error or Go's url.Error says of the
// request and the answer.
func withRequest(e *Error, err error) *Error {
	var terr *transport.Error
	if errors.As(err, &terr) {
		e.Status, e.Diagnostics = terr.StatusCode, terr.Errors
		if terr.Request != nil {
			e.Method, e.URL = terr.Request.Method, cleanURL(terr.Request.URL)
			if e.Host == "" {
				e.Host = terr.Request.URL.Host
			}
		}
		return e
	}
	var uerr *url.Error
	if errors.As(err, &uerr) && e.Method == "" {
		e.Method = uerr.Op
		if u, perr := url.Parse(uerr.URL); perr == nil {
			e.URL = cleanURL(u)
			if e.Host == "" {
				e.Host = u.Host
			}
		}
	}
	return e
}

// requestError is a failure of req: its method, URL and host, with the kind and the words.
func requestError(req *http.Request, kind Kind, message string, err error) *Error {
	return &Error{Kind: kind, Method: req.Method, URL: cleanURL(req.URL), Host: req.URL.Host, Message: message, Err: err}
}

// cleanURL is u without credentials, query or fragment: upload locations carry session state
// and sometimes signed tokens.
func cleanURL(u *url.URL) string {
	if u == nil {
		return ""
	}
	c := *u
	c.User, c.RawQuery, c.Fragment, c.ForceQuery = nil, "", "", false
	return c.String()
}

// kindOf sorts a cause that is not an Error.
func kindOf(err error) Kind {
	var (
		inner *Error
		terr  *transport.Error
		nerr  net.Error
	)
	switch {
	case errors.As(err, &inner):
		return inner.Kind
	case errors.As(err, &terr):
		return Answered
	case errors.Is(err, context.DeadlineExceeded):
		return Unreachable
	case errors.As(err, &nerr), errors.Is(err, io.ErrUnexpectedEOF):
		return Unreachable
	}
	return Answered
}

// hasKind says whether an Error of kind k is anywhere in err's chain (a broken download wraps
// the stall that broke it).
func hasKind(err error, k Kind) bool {
	var e *Error
	for errors.As(err, &e) {
		if e.Kind == k {
			return true
		}
		err = e.Err
	}
	return false
}

// OutOfReach says whether err is a registry that gave no answer about what was asked: it could
// not be reached or spoken to, did not answer in time, or answered that it is unavailable (5xx,
// 429). A registry that answered no (not found, credentials refused, a format toa-push does not
// take, a blob that is not its digest, a bound broken) is not out of reach: what it said holds,
// and a plan must not be made around it.
func OutOfReach(err error) bool {
	var e *Error
	if errors.As(err, &e) {
		switch {
		case e.Kind == Credentials, e.Kind == Corrupt, e.Kind == Hostile:
			return false
		case e.Status != 0:
			return retryStatus(e.Status)
		case e.Kind == Answered && e.Err != nil:
			return OutOfReach(e.Err)
		}
		return e.Kind != Answered
	}
	var terr *transport.Error
	if errors.As(err, &terr) {
		return retryStatus(terr.StatusCode)
	}
	var nerr net.Error
	// net.Error covers a refused or reset connection too: syscall.Errno is one
	return errors.As(err, &nerr) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, io.ErrUnexpectedEOF)
}
