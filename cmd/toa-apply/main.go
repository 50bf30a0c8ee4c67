// Command toa-apply renders a kustomization written by toa-push, applies it to a cluster with
// server-side apply, prunes what the application no longer has, and waits until every workload
// has rolled out and every pod it replaced is gone.
package main

import (
	"context"
	"io"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/toa-deploy/toa-deploy/internal/cli"
	"github.com/toa-deploy/toa-deploy/internal/fault"
	"github.com/toa-deploy/toa-deploy/kustomize"
)

type applyCommand struct {
	Dir            string        `arg:"" optional:"" name:"DIR" help:"The kustomization's folder (default: deployment), or oci://REF[@DIGEST] of an artifact toa-push --artifact pushed; with --rollback, the REVISION (default: the previous one)."`
	Render         bool          `name:"render" help:"Print the rendered YAML and stop."`
	DryRun         string        `name:"dry-run" enum:"none,server" default:"none" help:"server: show what would change, change nothing."`
	Timeout        time.Duration `name:"timeout" default:"5m" help:"How long to wait for the rollout (a Go duration: 90s, 12m, 1h30m)."`
	RequestTimeout time.Duration `name:"request-timeout" default:"30s" help:"How long one request to the API server may go unanswered (0: no bound)."`
	Prune          bool          `name:"prune" default:"true" negatable:"" help:"Delete what the application had and no longer has."`
	ForceConflicts bool          `name:"force-conflicts" help:"Take fields that other managers own."`
	Delete         bool          `name:"delete" help:"Remove the whole application."`
	Diff           bool          `name:"diff" help:"Show what would change as a unified diff per object (server-side dry run, prune included) and change nothing; exit 0 same, 1 differs, 2 or more error, as kubectl diff."`
	History        bool          `name:"history" help:"List the application's revisions."`
	Rollback       bool          `name:"rollback" help:"Apply a recorded revision again: toa-apply --rollback [REVISION]; needs only the kubeconfig."`
	RollbackOnFail bool          `name:"rollback-on-failure" help:"When the rollout fails or times out, or the apply stops part-way, apply the previous revision and wait for it."`
	HistoryMax     int           `name:"history-max" default:"10" help:"How many revisions to keep."`
	Name           string        `name:"name" placeholder:"CONTEXT" help:"The application (Toa context) for --history and --rollback, when the kustomization folder does not name it."`
	Kubeconfig     string        `name:"kubeconfig" placeholder:"FILE" help:"Path to the kubeconfig file (default: KUBECONFIG, ~/.kube/config, or in-cluster)."`
	Context        string        `name:"context" help:"The kubeconfig context to use."`
	Namespace      string        `name:"namespace" short:"n" help:"The namespace to apply to."`
	Output         cli.Output    `name:"output" short:"o" default:"text" enum:"text,json" help:"text or json."`
	Verbose        bool          `name:"verbose" short:"v" help:"Log what is done, step by step."`
	ociFlags       `embed:""`

	credentials string    // where the kubeconfig's credentials come from, for a 401 or 403
	out         io.Writer // results; os.Stdout when nil
}

func (c *applyCommand) stdout() io.Writer {
	if c.out == nil {
		return os.Stdout
	}
	return c.out
}

func main() {
	if code, supervised := cli.Supervise("toa-apply"); supervised {
		os.Exit(code)
	}
	if os.Getenv("GOGC") == "" {
		// most of what toa-apply allocates is kustomize's garbage (a render of 1,000
		// compositions allocates gigabytes to keep tens of megabytes): a collection when the
		// heap has grown by half, not doubled, takes 35 MiB off its peak there (175 MiB to 140)
		// for no time that shows
		debug.SetGCPercent(50)
	}
	ctx, stop := cli.SignalContext(context.Background(), "toa-apply")
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
	if err := c.validate(); err != nil {
		return err
	}
	cleanup, err := c.fromRegistry(ctx, log)
	if err != nil {
		return err
	}
	defer cleanup()
	switch {
	case c.Render:
		return c.render(ctx, c.stdout())
	case c.History:
		return c.history(ctx, c.stdout(), log)
	case c.Diff:
		return c.diff(ctx, c.stdout(), log)
	}
	return c.apply(ctx, log)
}

// validate refuses flags that do not go together.
func (c *applyCommand) validate() error {
	modes := map[string]bool{"--render": c.Render, "--history": c.History, "--diff": c.Diff, "--delete": c.Delete, "--rollback": c.Rollback}
	var set []string
	for _, name := range []string{"--render", "--history", "--diff", "--delete", "--rollback"} {
		if modes[name] {
			set = append(set, name)
		}
	}
	switch {
	case len(set) > 1 && !(len(set) == 2 && c.Rollback && c.Diff):
		return fault.BadInputf("%s do not go together", strings.Join(set, " and "))
	case c.Diff && c.DryRun == "server":
		return fault.BadInputf("--diff is a server-side dry run already: leave out --dry-run")
	case c.HistoryMax < 1:
		// 0 is not "the default": a history of nothing would leave no revision to roll back to
		return fault.BadInputf("--history-max must be 1 or more, not %d", c.HistoryMax)
	case c.Rollback && c.Dir != "":
		if n, err := strconv.Atoi(c.Dir); err != nil || n < 1 {
			return fault.BadInputf("--rollback takes a revision number (see --history), not %q", c.Dir)
		}
	}
	return nil
}

// dir is the kustomization's folder.
func (c *applyCommand) dir() string {
	if c.Dir == "" || c.Rollback {
		return "deployment"
	}
	return c.Dir
}

// render prints the kustomization rendered, in the order it is applied.
func (c *applyCommand) render(ctx context.Context, w io.Writer) error {
	objects, err := c.objects(ctx)
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
