// Command toa-apply renders a kustomization written by toa-push, applies it to a cluster with
// server-side apply, prunes what the application no longer has, and waits until every workload
// has rolled out and every pod it replaced is gone.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/sirupsen/logrus"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/toa-deploy/toa-deploy/fault"
	"github.com/toa-deploy/toa-deploy/internal/cli"
	"github.com/toa-deploy/toa-deploy/kustomize"
)

type applyCommand struct {
	Dir            string        `arg:"" optional:"" name:"DIR" default:"deployment" help:"The kustomization's folder."`
	Render         bool          `name:"render" help:"Print the rendered YAML and stop."`
	DryRun         string        `name:"dry-run" enum:"none,server" default:"none" help:"server: show what would change, change nothing."`
	Timeout        time.Duration `name:"timeout" default:"5m" help:"How long to wait for the rollout (a Go duration: 90s, 12m, 1h30m)."`
	RequestTimeout time.Duration `name:"request-timeout" default:"30s" help:"How long one request to the API server may go unanswered (0: no bound)."`
	Prune          bool          `name:"prune" default:"true" negatable:"" help:"Delete what the application had and no longer has."`
	ForceConflicts bool          `name:"force-conflicts" help:"Take fields that other managers own."`
	Delete         bool          `name:"delete" help:"Remove the whole application."`
	Kubeconfig     string        `name:"kubeconfig" placeholder:"FILE" help:"Path to the kubeconfig file (default: KUBECONFIG, ~/.kube/config, or in-cluster)."`
	Context        string        `name:"context" help:"The kubeconfig context to use."`
	Namespace      string        `name:"namespace" short:"n" help:"The namespace to apply to."`
	Output         cli.Output    `name:"output" short:"o" default:"text" enum:"text,json" help:"text or json."`
	Verbose        bool          `name:"verbose" short:"v" help:"Log what is done, step by step."`

	credentials string // where the kubeconfig's credentials come from, for a 401 or 403
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := cli.Logger(os.Stderr, false)
	cmd := &applyCommand{}
	if err := cli.Parse(cmd, "toa-apply", "Apply a Toa application's kustomization and wait until it has rolled out.", os.Args[1:], os.Stdout); err != nil {
		cli.Exit(log, err)
	}
	log = cli.Logger(os.Stderr, cmd.Verbose)
	cli.Exit(log, cmd.Run(ctx, log))
}

func (c *applyCommand) Run(ctx context.Context, log *logrus.Logger) error {
	if c.Render {
		return c.render(os.Stdout)
	}
	return c.apply(ctx, log)
}

// render prints the kustomization rendered, in the order it is applied.
func (c *applyCommand) render(w io.Writer) error {
	if info, err := os.Stat(c.Dir); err != nil || !info.IsDir() {
		return fault.BadInput(fmt.Errorf("%s is not a folder: give the kustomization's folder, the one toa-push -k wrote (default: deployment)", c.Dir))
	}
	objects, err := kustomize.Render(filesys.MakeFsOnDisk(), c.Dir)
	if err != nil {
		return err
	}
	data, err := kustomize.YAML(objects)
	if err != nil {
		return err
	}
	_, err = w.Write(data)
	return err
}
