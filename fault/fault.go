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

func (e *Input) Error() string {
	var b strings.Builder
	if e.File != "" {
		b.WriteString(DisplayPath(e.File))
		if e.Line > 0 {
			fmt.Fprintf(&b, ":%d", e.Line)
		}
		b.WriteString(": ")
	}
	if e.Key != "" {
		b.WriteString(e.Key)
		b.WriteString(": ")
	}
	switch {
	case e.Message != "":
		b.WriteString(e.Message)
	case e.Err != nil:
		b.WriteString(e.Err.Error())
	}
	if e.Hint != "" {
		b.WriteString("\n  ")
		b.WriteString(e.Hint)
	}
	return b.String()
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

// ClassOf sorts err: bad input first (a deadline hit while reading a user's file is still the
// file's fault only if the reader said so), then a timeout, else a failure. nil is ClassFailed;
// callers check for nil first.
func ClassOf(err error) Class {
	var input *Input
	switch {
	case errors.As(err, &input):
		return ClassInput
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
