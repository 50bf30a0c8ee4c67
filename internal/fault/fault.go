// Package fault says whose fault an error is, so that both commands exit with the code CI acts
// on: the user's input (exit 2), the clock (exit 3), or the work itself (exit 1). Every room
// returns its bad-input errors as *Input and its timeouts as *Timeout, wrapped with %w on the way
// up; any other error is a failure of the work. cmd maps the class to the exit code.
package fault

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"unicode/utf8"
)

// Input is a mistake in what the user gave: a file of the application, a flag, a kustomization.
// It names the file, the key path inside it and the line where there are such, what is wrong and
// what would be right.
type Input struct {
	File    string // the file, shown relative to the working directory where that is shorter
	Key     string // the key path, like "registry.platforms[1]"; empty for the whole file
	Line    int    // 1-based; 0 when unknown
	Message string // what is wrong; empty to say what Err says
	Hint    string // what to do; may be empty
	Err     error  // the cause, or a sentinel callers test for with errors.Is; may be nil
}

func (e *Input) Unwrap() error { return e.Err }

// Error reads like a compiler's message. What came from the user's files (a file name, a key, a
// value quoted in the message) may hold control characters: they are escaped, so that nothing a
// file holds can move the cursor, recolour or rewrite a terminal or a CI log.
func (e *Input) Error() string {
	var b strings.Builder
	if e.File != "" {
		b.WriteString(Printable(DisplayPath(e.File)))
		if e.Line > 0 {
			fmt.Fprintf(&b, ":%d", e.Line)
		}
		b.WriteString(": ")
	}
	if e.Key != "" {
		b.WriteString(Printable(e.Key))
		b.WriteString(": ")
	}
	switch {
	case e.Message != "":
		b.WriteString(printableLines(e.Message))
	case e.Err != nil:
		b.WriteString(printableLines(e.Err.Error()))
	}
	if e.Hint != "" {
		b.WriteString("\n  ")
		b.WriteString(printableLines(e.Hint))
	}
	return b.String()
}

// Printable escapes what a terminal would act on instead of showing: control characters (C0, DEL,
// C1), the marks that reorder text right to left, and bytes that are not UTF-8, as Go writes them
// in a string literal ("\x1b", "\n", "\u202e", "\xff"). Anything else is left as it is.
func Printable(s string) string { return escape(s, false) }

// printableLines is Printable keeping newlines and tabs: a message of several lines stays one.
func printableLines(s string) string { return escape(s, true) }

func escape(s string, keepLines bool) string {
	if !needsEscape(s, keepLines) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, "\\x%02x", s[i])
		case keepLines && (r == '\n' || r == '\t'):
			b.WriteRune(r)
		case r == '\n':
			b.WriteString("\\n")
		case r == '\t':
			b.WriteString("\\t")
		case r == '\r':
			b.WriteString("\\r")
		case isUnprintable(r) && r < 0x100:
			fmt.Fprintf(&b, "\\x%02x", r)
		case isUnprintable(r):
			fmt.Fprintf(&b, "\\u%04x", r)
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

func needsEscape(s string, keepLines bool) bool {
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if (r == utf8.RuneError && size == 1) || (isUnprintable(r) && !(keepLines && (r == '\n' || r == '\t'))) {
			return true
		}
		i += size
	}
	return false
}

// isUnprintable is true of C0 and C1 control characters, DEL, and the bidirectional formatting
// characters that can make a line read otherwise than it is.
func isUnprintable(r rune) bool {
	switch {
	case r < 0x20, r >= 0x7f && r < 0xa0:
		return true
	case r == 0x061c, r == 0x200e, r == 0x200f, r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069:
		return true
	}
	return false
}

// BadInput marks err as a mistake in the user's input. It returns nil for nil.
func BadInput(err error) error {
	if err == nil {
		return nil
	}
	return &Input{Err: err}
}

// BadInputf is BadInput(fmt.Errorf(format, args...)).
func BadInputf(format string, args ...any) error {
	return &Input{Err: fmt.Errorf(format, args...)}
}

// Timeout is work that ran out of time: a deadline the user set, or a bound on a wait that saw
// no progress. errors.Is(err, context.DeadlineExceeded) holds for it.
type Timeout struct {
	Err error // what was being done and for how long; never nil
}

func (e *Timeout) Error() string { return e.Err.Error() }
func (e *Timeout) Unwrap() error { return e.Err }

// Is makes every Timeout a context.DeadlineExceeded, whatever its cause says.
func (e *Timeout) Is(target error) bool { return target == context.DeadlineExceeded }

// TimedOut marks err as time having run out. It returns nil for nil.
func TimedOut(err error) error {
	if err == nil {
		return nil
	}
	return &Timeout{Err: err}
}

// Class is whose fault an error is.
type Class int

const (
	ClassFailed  Class = iota // the work failed: a registry refused, a rollout failed
	ClassInput                // the user's input is wrong
	ClassTimeout              // time ran out
)

// Classed is an error that says its own class: a registry's (registry.Error), whose kind decides
// it.
type Classed interface {
	error
	Class() Class
}

// ClassOf sorts err: bad input first (a deadline hit while reading a user's file is still the
// file's fault only if the reader said so), then a Timeout, then what an error that says its class
// says, then a deadline, else a failure. nil is ClassFailed; callers check for nil first.
func ClassOf(err error) Class {
	var (
		input   *Input
		timeout *Timeout
		classed Classed
	)
	switch {
	case errors.As(err, &input):
		return ClassInput
	case errors.As(err, &timeout):
		return ClassTimeout
	case errors.As(err, &classed):
		return classed.Class()
	case errors.Is(err, context.DeadlineExceeded):
		return ClassTimeout
	}
	return ClassFailed
}

// IsInput reports whether err is, or wraps, a mistake in the user's input.
func IsInput(err error) bool {
	var input *Input
	return errors.As(err, &input)
}

// DisplayPath shortens an absolute path to one relative to the working directory, when that is
// where the user is, so that messages read like compiler errors.
func DisplayPath(path string) string {
	if !filepath.IsAbs(path) {
		return path
	}
	wd, err := filepath.Abs(".")
	if err != nil {
		return path
	}
	rel, err := filepath.Rel(wd, path)
	if err != nil || strings.HasPrefix(rel, "..") {
		return path
	}
	return rel
}
