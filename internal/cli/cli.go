// Package cli holds what both commands share: exit codes, how errors and warnings reach the
// user, and whether output goes to a terminal. It is wiring only; the work is in the packages
// named after it.
package cli

import (
	"fmt"
	"io"
	"os"

	"github.com/sirupsen/logrus"

	"github.com/toa-deploy/toa-deploy/fault"
)

// Exit codes of both commands (DESIGN.md "The command line").
const (
	ExitOK       = 0
	ExitFailed   = 1 // the work failed: a registry refused, a rollout failed
	ExitBadInput = 2 // flags, context, kustomization
	ExitTimeout  = 3
)

// ExitCode maps an error to the exit code CI acts on.
func ExitCode(err error) int {
	if err == nil {
		return ExitOK
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
	info, err := f.Stat()
	return err == nil && info.Mode()&os.ModeCharDevice != 0
}

// Exit reports err on stderr the way a user should see it, and exits with its code.
func Exit(log *logrus.Logger, err error) {
	if err == nil {
		os.Exit(ExitOK)
	}
	log.Error(err.Error())
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
