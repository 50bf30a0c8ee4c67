package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sirupsen/logrus"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/toa-deploy/toa-deploy/cluster"
	"github.com/toa-deploy/toa-deploy/diff"
	"github.com/toa-deploy/toa-deploy/fault"
	"github.com/toa-deploy/toa-deploy/internal/cli"
	"github.com/toa-deploy/toa-deploy/revision"
	"github.com/toa-deploy/toa-deploy/rollout"
)

func (c *applyCommand) printJSON(w io.Writer, v any) {
	if c.Output != cli.JSON {
		return
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// application is the set --history and --rollback read: --name, else the one the kustomization
// folder names, else the only one in the namespace.
func (c *applyCommand) application(ctx context.Context, k *cluster.Client, namespace string) (rollout.Set, error) {
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
	apps, err := rollout.Applications(ctx, k, namespace)
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

// history lists the revisions, as helm history does; a Secret that looks like a revision and is
// not one toa-apply recorded is named on stderr and left out.
func (c *applyCommand) history(ctx context.Context, w io.Writer, log *logrus.Logger) error {
	k, namespace, err := c.client()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()
	set, err := c.application(ctx, k, namespace)
	if err != nil {
		return c.exitError(err)
	}
	h, err := revision.Read(ctx, k, set)
	if err != nil {
		return c.exitError(err)
	}
	for _, s := range h.Skipped {
		log.Warnf("secret/%s is skipped: %s", s.Secret, s.Reason)
	}
	revs := h.Revisions
	if c.Output == cli.JSON {
		if revs == nil {
			revs = []revision.Revision{}
		}
		c.printJSON(w, revs)
		return nil
	}
	if len(revs) == 0 {
		fmt.Fprintf(w, "no revisions of %s in namespace %s\n", set.Name, set.Namespace)
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "REVISION\tUPDATED\tSTATUS\tDESCRIPTION\tOBJECTS\tIMAGES")
	for _, r := range revs {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d\t%s\n", r.Number, r.Time.Local().Format(time.DateTime), r.Status, r.Description, r.Objects, imagesColumn(r.Images))
	}
	return tw.Flush()
}

// imagesColumn is a revision's images as --history shows them: all of a few, the first of many
// and how many more (-o json lists every one).
func imagesColumn(images []string) string {
	const shown = 3
	if len(images) <= shown {
		return strings.Join(images, " ")
	}
	return fmt.Sprintf("%s (and %d more: -o json lists them)", strings.Join(images[:shown], " "), len(images)-shown)
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
	k, namespace, err := c.client()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()
	objects, err := c.diffSource(ctx, k, namespace)
	if err != nil {
		return c.exitError(err)
	}
	res, err := rollout.Apply(ctx, k, objects, rollout.Options{Namespace: namespace, Force: c.ForceConflicts,
		DryRun: true, Prune: c.Prune, Version: toolVersion(), OnlyOwn: c.Rollback})
	if err != nil {
		return c.exitError(err)
	}
	diffs, err := diff.Diffs(res)
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
			diffs = []diff.ObjectDiff{}
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

// diffSource is what --diff compares: the kustomization, or with --rollback a revision.
func (c *applyCommand) diffSource(ctx context.Context, k *cluster.Client, namespace string) ([]*unstructured.Unstructured, error) {
	if !c.Rollback {
		return c.objects(ctx)
	}
	set, err := c.application(ctx, k, namespace)
	if err != nil {
		return nil, err
	}
	_, objects, err := revision.Load(ctx, k, set, c.revisionNumber())
	return objects, err
}
