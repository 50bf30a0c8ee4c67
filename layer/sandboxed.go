package layer

import (
	"github.com/toa-deploy/toa-deploy/sandbox"
)

// sandboxCommand completes c with what every run of other people's code in the base gets: the
// network of WithScriptNetwork, and warnings of how it ran, named by what runs (a build.run
// line, the install scripts of some packages).
func (o *options) sandboxCommand(c sandbox.Command, what string) sandbox.Command {
	c.Notice = o.warn
	return c
}
