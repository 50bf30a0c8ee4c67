package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sirupsen/logrus"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"

	"github.com/toa-deploy/toa-deploy/fault"
	"github.com/toa-deploy/toa-deploy/internal/cli"
	"github.com/toa-deploy/toa-deploy/rollout"
)

// output is what toa-apply -o json prints: the apply's result, the rollout's outcome, the
// revision recorded, and a rollback after a failure.
type output struct {
	*rollout.Result
	Rollout  *outcome          `json:"rollout,omitempty"`
	Revision *rollout.Revision `json:"revision,omitempty"`
	Rollback *rollbackOutcome  `json:"rollback,omitempty"`
}

// outcome is how the wait ended.
type outcome struct {
	Done     bool             `json:"done"`
	Failure  *rollout.Failure `json:"failure,omitempty"`
	Awaiting []rollout.Status `json:"timedOutAwaiting,omitempty"` // what was awaited when --timeout passed
	Error    string           `json:"error,omitempty"`
}

func (o *outcome) set(err error) {
	var f *rollout.Failure
	var a *rollout.Awaiting
	switch {
	case err == nil:
		o.Done = true
	case errors.As(err, &f):
		o.Failure = f
	case errors.As(err, &a):
		o.Awaiting = a.Objects
	default:
		o.Error = err.Error()
	}
}

// rollbackOutcome is a rollback --rollback-on-failure made.
type rollbackOutcome struct {
	To       int               `json:"to"`
	Done     bool              `json:"done"`
	Revision *rollout.Revision `json:"revision,omitempty"`
	Error    string            `json:"error,omitempty"`
}

func (c *applyCommand) printJSON(w io.Writer, v any) {
	if c.Output != cli.JSON {
		return
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// source is what to apply, and how its revision will be described: the kustomization, or with
// --rollback a recorded revision.
func (c *applyCommand) source(ctx context.Context, cfg *rest.Config, namespace string) ([]*unstructured.Unstructured, string, error) {
	if !c.Rollback {
		objects, err := c.objects(ctx)
		return objects, "apply", err
	}
	set, err := c.application(ctx, cfg, namespace)
	if err != nil {
		return nil, "", err
	}
	n := 0
	if c.Dir != "" {
		n, _ = strconv.Atoi(c.Dir) // validate checked it
	}
	rev, objects, err := rollout.LoadRevision(ctx, cfg, set, n)
	if err != nil {
		return nil, "", err
	}
	return objects, fmt.Sprintf("rollback to %d", rev.Number), nil
}

// application is the set --history and --rollback read: --name, else the one the kustomization
// folder names, else the only one in the namespace.
func (c *applyCommand) application(ctx context.Context, cfg *rest.Config, namespace string) (rollout.Set, error) {
	if c.Name != "" {
		return rollout.NewSet(c.Name, namespace), nil
	}
	if info, err := os.Stat(c.dir()); err == nil && info.IsDir() {
		objects, err := c.objects(ctx)
		if err != nil {
			return rollout.Set{}, err
		}
		return rollout.SetOf(objects, namespace)
	}
	apps, err := rollout.Applications(ctx, cfg, namespace)
	switch {
	case err != nil:
		return rollout.Set{}, err
	case len(apps) == 0:
		return rollout.Set{}, fault.BadInputf("toa-apply has applied no application to namespace %s: give -n NAMESPACE or --name CONTEXT", namespace)
	case len(apps) > 1:
		return rollout.Set{}, fault.BadInputf("namespace %s has %d applications (%s): give --name CONTEXT", namespace, len(apps), strings.Join(apps, ", "))
	}
	return rollout.NewSet(apps[0], namespace), nil
}

// record keeps the set as a new revision; its own bound, as the apply's --timeout may be spent.
func (c *applyCommand) record(ctx context.Context, cfg *rest.Config, set rollout.Set, objects []*unstructured.Unstructured, description string) (*rollout.Revision, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	rev, err := rollout.Record(ctx, cfg, set, objects, rollout.RecordOptions{Description: description, Version: toolVersion(), Max: c.HistoryMax})
	if err != nil {
		return nil, err
	}
	return &rev, nil
}

// rollbackAfter applies the latest recorded revision after a failed apply and waits for it, with
// a --timeout of its own, and records it. The error stays the failure's (its exit code too), with
// what the rollback did.
func (c *applyCommand) rollbackAfter(ctx context.Context, log *logrus.Logger, cfg *rest.Config, set rollout.Set, opts rollout.Options, failed error) (*rollbackOutcome, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.Timeout)
	defer cancel()
	revs, err := rollout.History(ctx, cfg, set)
	if err != nil {
		return nil, fmt.Errorf("%w\n  --rollback-on-failure: %s", failed, err.Error())
	}
	if len(revs) == 0 {
		return nil, fmt.Errorf("%w\n  --rollback-on-failure: no previous revision to roll back to: the application is left as the failed apply left it", failed)
	}
	prev := revs[len(revs)-1]
	rb := &rollbackOutcome{To: prev.Number}
	log.Warnf("the apply failed; rolling back to revision %d", prev.Number)
	_, objects, err := rollout.LoadRevision(ctx, cfg, set, prev.Number)
	if err == nil {
		var res *rollout.Result
		if res, err = rollout.Apply(ctx, cfg, objects, opts); err == nil {
			c.report(c.stdout(), res)
			err = c.wait(ctx, cfg, res)
		}
	}
	if err != nil {
		rb.Error = err.Error()
		return rb, fmt.Errorf("%w\n  --rollback-on-failure: the rollback to revision %d did not finish: %s", failed, prev.Number, err.Error())
	}
	rb.Done = true
	rb.Revision, err = c.record(ctx, cfg, set, objects, fmt.Sprintf("rollback to %d after a failed apply", prev.Number))
	if err != nil {
		rb.Error = err.Error()
	}
	return rb, fmt.Errorf("%w\n  --rollback-on-failure: rolled back to revision %d: its pods are ready and the replaced ones gone", failed, prev.Number)
}

// history lists the revisions, as helm history does.
func (c *applyCommand) history(ctx context.Context, w io.Writer) error {
	cfg, namespace, err := c.cluster()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()
	set, err := c.application(ctx, cfg, namespace)
	if err != nil {
		return c.exitError(err)
	}
	revs, err := rollout.History(ctx, cfg, set)
	if err != nil {
		return c.exitError(err)
	}
	if c.Output == cli.JSON {
		if revs == nil {
			revs = []rollout.Revision{}
		}
		c.printJSON(w, revs)
		return nil
	}
	if len(revs) == 0 {
		fmt.Fprintf(w, "no revisions of %s in namespace %s\n", set.Name, set.Namespace)
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "REVISION\tUPDATED\tDESCRIPTION\tOBJECTS\tIMAGES")
	for _, r := range revs {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%s\n", r.Number, r.Time.Local().Format(time.DateTime), r.Description, r.Objects, strings.Join(r.Images, " "))
	}
	return tw.Flush()
}

// diff prints what an apply would change, as kubectl diff: exit 0 the same, 1 differences, 2 or
// more an error (a failure is 2, a timeout 3).
func (c *applyCommand) diff(ctx context.Context, w io.Writer) error {
	err := c.diffs(ctx, w)
	var coded *cli.Coded
	if err != nil && !errors.As(err, &coded) && cli.ExitCode(err) == cli.ExitFailed {
		return &cli.Coded{Code: cli.ExitBadInput, Err: err}
	}
	return err
}

func (c *applyCommand) diffs(ctx context.Context, w io.Writer) error {
	cfg, namespace, err := c.cluster()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()
	objects, _, err := c.source(ctx, cfg, namespace)
	if err != nil {
		return c.exitError(err)
	}
	res, err := rollout.Apply(ctx, cfg, objects, rollout.Options{Namespace: namespace, Force: c.ForceConflicts,
		DryRun: true, Prune: c.Prune, Version: toolVersion()})
	if err != nil {
		return c.exitError(err)
	}
	diffs, err := rollout.Diffs(res)
	if err != nil {
		return err
	}
	if command, ok := os.LookupEnv(externalDiffEnv); ok && c.Output != cli.JSON {
		differ, err := externalDiff(ctx, command, diffs, w)
		if err != nil || !differ {
			return err
		}
		return &cli.Coded{Code: 1}
	}
	if c.Output == cli.JSON {
		if diffs == nil {
			diffs = []rollout.ObjectDiff{}
		}
		c.printJSON(w, diffs)
	} else {
		for _, d := range diffs {
			fmt.Fprintf(w, "diff -u -N LIVE/%s MERGED/%s\n%s", d.Ref, d.Ref, d.Diff)
		}
	}
	if len(diffs) > 0 {
		return &cli.Coded{Code: 1}
	}
	return nil
}
