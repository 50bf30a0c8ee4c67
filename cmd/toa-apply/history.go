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

	"github.com/toa-deploy/toa-deploy/internal/apply/diff"
	"github.com/toa-deploy/toa-deploy/internal/apply/release"
	"github.com/toa-deploy/toa-deploy/internal/cli"
)

func (c *applyCommand) printJSON(w io.Writer, v any) {
	if c.Output != cli.JSON {
		return
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// kustomization renders the kustomization folder when there is one: the application --history
// and --rollback read when --name does not name it (release.Application).
func (c *applyCommand) kustomization() func(context.Context) ([]*unstructured.Unstructured, error) {
	if info, err := os.Stat(c.dir()); err != nil || !info.IsDir() {
		return nil
	}
	return c.objects
}

// orEmpty is s, or an empty slice for nil: -o json prints [] rather than null.
func orEmpty[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// history lists the revisions, as helm history does; a Secret that looks like a revision and is
// not one toa-apply recorded is named on stderr and left out.
func (c *applyCommand) history(ctx context.Context, w io.Writer, log *logrus.Logger) error {
	rel, err := c.conductor(log)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()
	set, err := rel.Application(ctx, c.Name, c.kustomization())
	if err != nil {
		return err
	}
	h, err := rel.History(ctx, set)
	if err != nil {
		return err
	}
	for _, s := range h.Skipped {
		log.Warnf("secret/%s is skipped: %s", s.Secret, s.Reason)
	}
	revs := h.Revisions
	if c.Output == cli.JSON {
		c.printJSON(w, orEmpty(revs))
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
func (c *applyCommand) diff(ctx context.Context, w io.Writer, log *logrus.Logger) error {
	err := c.diffs(ctx, w, log)
	var coded *cli.Coded
	if err != nil && !errors.As(err, &coded) && cli.ExitCode(err) == cli.ExitFailed {
		return &cli.Coded{Code: cli.ExitBadInput, Err: err}
	}
	return err
}

func (c *applyCommand) diffs(ctx context.Context, w io.Writer, log *logrus.Logger) error {
	rel, err := c.conductor(log)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()
	diffs, err := c.diffsOf(ctx, rel)
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
		c.printJSON(w, orEmpty(diffs))
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

// diffsOf is what --diff shows: the kustomization's changes, or with --rollback a revision's.
func (c *applyCommand) diffsOf(ctx context.Context, rel *release.Release) ([]diff.ObjectDiff, error) {
	if !c.Rollback {
		objects, err := c.objects(ctx)
		if err != nil {
			return nil, c.exitError(err)
		}
		return rel.Diff(ctx, objects)
	}
	set, err := rel.Application(ctx, c.Name, c.kustomization())
	if err != nil {
		return nil, err
	}
	return rel.DiffRollback(ctx, set, c.revisionNumber())
}
