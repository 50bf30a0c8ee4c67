// Package cli holds what both commands share: exit codes, how errors and warnings reach the
// user, and whether output goes to a terminal. It is wiring only; the work is in the packages
// named after it.
package cli

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/sirupsen/logrus"

	"github.com/toa-deploy/toa-deploy/internal/fault"
)

// Exit codes of both commands (DESIGN.md "The command line").
const (
	ExitOK       = 0
	ExitFailed   = 1 // the work failed: a registry refused, a rollout failed
	ExitBadInput = 2 // flags, context, kustomization
	ExitTimeout  = 3
)

// Coded is an exit code of its own, for a mode whose codes are not the classes' (toa-apply
// --diff exits 1 for "differences", as kubectl diff, so a failure there is 2). Err, when not nil,
// is reported as usual; a nil Err exits quietly.
type Coded struct {
	Code int
	Err  error
}

func (e *Coded) Error() string {
	if e.Err == nil {
		return fmt.Sprintf("exit %d", e.Code)
	}
	return e.Err.Error()
}

func (e *Coded) Unwrap() error { return e.Err }

// ExitCode maps an error to the exit code CI acts on.
func ExitCode(err error) int {
	if err == nil {
		return ExitOK
	}
	var coded *Coded
	if errors.As(err, &coded) {
		return coded.Code
	}
	switch fault.ClassOf(err) {
	case fault.ClassInput:
		return ExitBadInput
	case fault.ClassTimeout:
		return ExitTimeout
	}
	return ExitFailed
}

// Logger returns the commands' logger: plain lines on stderr, "warning: ..." and "error: ...".
func Logger(w io.Writer, verbose bool) *logrus.Logger {
	l := logrus.New()
	l.SetOutput(w)
	l.SetFormatter(&plainFormatter{})
	if verbose {
		l.SetLevel(logrus.DebugLevel)
	}
	return l
}

type plainFormatter struct{}

func (plainFormatter) Format(e *logrus.Entry) ([]byte, error) {
	prefix := ""
	switch e.Level {
	case logrus.WarnLevel:
		prefix = "warning: "
	case logrus.ErrorLevel, logrus.FatalLevel, logrus.PanicLevel:
		prefix = "error: "
	case logrus.DebugLevel, logrus.TraceLevel:
		prefix = "debug: "
	}
	return []byte(prefix + e.Message + "\n"), nil
}

// IsTerminal reports whether f is a terminal and not a CI log: the live progress display goes
// there, plain lines everywhere else.
func IsTerminal(f *os.File) bool {
	if os.Getenv("CI") != "" || os.Getenv("TERM") == "dumb" {
		return false
	}
	if f == os.Stderr && os.Getenv(terminalVariable) == "1" {
		return true // a worker under Supervise, whose supervisor writes to a terminal
	}
	info, err := f.Stat()
	return err == nil && info.Mode()&os.ModeCharDevice != 0
}

// Exit reports err on stderr the way a user should see it, and exits with its code.
func Exit(log *logrus.Logger, err error) {
	if err == nil {
		os.Exit(ExitOK)
	}
	if coded, ok := err.(*Coded); !ok || coded.Err != nil {
		log.Error(err.Error())
	}
	os.Exit(ExitCode(err))
}

// Output is the --output flag of both commands.
type Output string

// Output formats.
const (
	Text Output = "text"
	JSON Output = "json"
)

// Validate refuses a format the commands do not write.
func (o Output) Validate() error {
	if o != Text && o != JSON {
		return fmt.Errorf("--output must be text or json, not %q", string(o))
	}
	return nil
}
