// Command toa-push builds every image of a Toa application, pushes what the registry lacks and
// writes the application's Kubernetes manifests as a kustomization.
package main

import (
	"context"
	"os"

	"github.com/toa-deploy/toa-deploy/internal/cli"
	"github.com/toa-deploy/toa-deploy/layer/sandbox"
)

func main() {
	sandbox.Init() // the re-executed init of a build inside a base: it never returns there
	if code, supervised := cli.Supervise("toa-push"); supervised {
		os.Exit(code)
	}
	ctx, stop := cli.SignalContext(context.Background(), "toa-push")
	defer stop()
	log := cli.Logger(os.Stderr, false)
	cmd := &pushCommand{}
	if err := cli.Parse(cmd, "toa-push", "Build and push the images of a Toa application, and write its kustomization.", os.Args[1:], os.Stdout); err != nil {
		cli.Exit(log, err)
	}
	log = cli.Logger(os.Stderr, cmd.Verbose)
	cli.Exit(log, cmd.Run(ctx, log))
}
