package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/toa-deploy/toa-deploy/internal/cli"
	"github.com/toa-deploy/toa-deploy/internal/fsys"
)

// pruneCache is --prune-cache: the caches pruned to TOA_CACHE_MAX now, what went printed.
func (c *pushCommand) pruneCache(ctx context.Context) error {
	root, max, err := cacheBound()
	if err != nil {
		return err
	}
	report, err := fsys.Prune(ctx, root, max, time.Now())
	if err != nil {
		return err
	}
	if c.Output == cli.JSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(report)
	}
	return writePruneText(os.Stdout, report)
}

// boundCache prunes the caches to TOA_CACHE_MAX at the end of a run, keeping what the run used
// (since started). A run that was stopped, or a cache that cannot be pruned, leaves it as it is:
// the next run prunes it.
func boundCache(ctx context.Context, log *logrus.Logger, started time.Time) {
	if ctx.Err() != nil {
		return
	}
	root, max, err := cacheBound()
	if err != nil {
		return // refused by Validate before any work
	}
	// a second back: a file's time is the kernel's coarse clock, a few milliseconds behind
	report, err := fsys.Prune(ctx, root, max, started.Add(-time.Second))
	if err != nil {
		log.Warnf("the cache %s was not pruned to %s (%s): %v", root, fsys.CacheMaxVariable, humanBytes(max), err)
		return
	}
	if len(report.Removed) > 0 {
		log.Infof("pruned the cache %s to %s (%s): %d entries removed, %s freed", root, fsys.CacheMaxVariable,
			humanBytes(max), len(report.Removed), humanBytes(report.Before-report.After))
	}
}

// cacheBound is the cache's root and TOA_CACHE_MAX.
func cacheBound() (string, int64, error) {
	root, err := fsys.CacheRoot()
	if err != nil {
		return "", 0, err
	}
	max, err := fsys.CacheMax()
	return root, max, err
}

func writePruneText(w io.Writer, r *fsys.PruneReport) error {
	_, err := fmt.Fprintf(w, "cache %s: %s before, %s after (%s %s), %d entries removed, %d kept\n", r.Root,
		humanBytes(r.Before), humanBytes(r.After), fsys.CacheMaxVariable, humanBytes(r.Max), len(r.Removed), r.Kept)
	return err
}
