package cli

import (
	"io"
	"os"

	"github.com/alecthomas/kong"

	"github.com/toa-deploy/toa-deploy/internal/fault"
)

// Parse reads args into cmd, a kong command struct. Help is printed to stdout and ends the
// process with 0; a flag error is a BadInput, exit 2, never a usage dump with a stack.
func Parse(cmd any, name, description string, args []string, stdout io.Writer) error {
	exited := false
	parser, err := kong.New(cmd,
		kong.Name(name),
		kong.Description(description),
		kong.Writers(stdout, os.Stderr),
		kong.ConfigureHelp(kong.HelpOptions{Compact: true}),
		kong.Exit(func(code int) { exited = true }),
	)
	if err != nil {
		return err // a mistake of ours in the struct tags
	}
	_, err = parser.Parse(args)
	if exited && err == nil {
		os.Exit(ExitOK)
	}
	if err != nil {
		return fault.BadInput(err)
	}
	return nil
}
