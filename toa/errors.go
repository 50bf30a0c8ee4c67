package toa

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
)

// Error is a mistake in the user's application: the file it is in, the key path inside that file,
// the line where the YAML has one, what is wrong and what would be right. Callers tell it apart
// from failures of the machine (a registry down, a disk full) with errors.As: it is bad input.
type Error struct {
	File    string // the file, relative to the working directory where that is shorter
	Key     string // the key path, like "registry.platforms[1]"; empty for the whole file
	Line    int    // 1-based; 0 when unknown
	Message string // what is wrong
	Hint    string // what to do; may be empty
	Err     error  // a sentinel callers may test for with errors.Is, or nil
}

// ErrNoContext is what Load's error wraps when the folder has no context.toa.yaml.
var ErrNoContext = errors.New("no " + ContextFile)

func (e *Error) Unwrap() error { return e.Err }

func (e *Error) Error() string {
	var b strings.Builder
	if e.File != "" {
		b.WriteString(displayPath(e.File))
		if e.Line > 0 {
			fmt.Fprintf(&b, ":%d", e.Line)
		}
		b.WriteString(": ")
	}
	if e.Key != "" {
		b.WriteString(e.Key)
		b.WriteString(": ")
	}
	b.WriteString(e.Message)
	if e.Hint != "" {
		b.WriteString("\n  ")
		b.WriteString(e.Hint)
	}
	return b.String()
}

// IsBadInput reports whether err is, or wraps, a mistake in the user's input.
func IsBadInput(err error) bool {
	var e *Error
	return errors.As(err, &e)
}

// displayPath shortens an absolute path to one relative to the working directory, when that is
// where the user is, so that messages read like compiler errors.
func displayPath(path string) string {
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
