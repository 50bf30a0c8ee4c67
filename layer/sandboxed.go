package layer

import (
	"errors"
	"fmt"
	"strings"

	"github.com/toa-deploy/toa-deploy/layer/sandbox"
)

// sandboxCommand completes c with what every run of other people's code in the base gets: the
// network of WithScriptNetwork, and warnings of how it ran and of the processes it left (killed
// by the sandbox), named by what runs (a build.run line, the install scripts of some packages).
func (o *options) sandboxCommand(c sandbox.Command, what string) sandbox.Command {
	c.Notice = o.warn
	c.Network = sandbox.Network(o.scriptNetwork)
	c.Leftovers = func(procs []string) {
		o.warn(fmt.Sprintf("%s left %d processes running when it ended, which were killed:\n    %s",
			what, len(procs), strings.Join(procs, "\n    ")))
	}
	return c
}

// bounded names what ran when the sandbox stopped it at one of its bounds (a fork bomb, a
// script writing gigabytes): the caller's error then says which package, not only which bound.
func bounded(err error, what string) error {
	var bound *sandbox.BoundError
	if errors.As(err, &bound) {
		return fmt.Errorf("%s: %w", what, err)
	}
	return err
}
