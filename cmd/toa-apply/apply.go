package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"

	"github.com/toa-deploy/toa-deploy/internal/apply/release"
	"github.com/toa-deploy/toa-deploy/internal/cli"
	"github.com/toa-deploy/toa-deploy/internal/cluster"
	"github.com/toa-deploy/toa-deploy/internal/fault"
	"github.com/toa-deploy/toa-deploy/kustomize"
)

// version is toa-apply's, written into the ApplySet's tooling annotation; -ldflags "-X
// main.version=..." sets it, else the module's version when built by `go install`.
var version = ""

func toolVersion() string {
	if version != "" {
		return version
	}
	if info, ok := debug.ReadBuildInfo(); ok && strings.HasPrefix(info.Main.Version, "v") {
		return info.Main.Version
	}
	return "v0.0.0-dev"
}

// apply renders the kustomization (or, with --rollback, reads a revision), applies it, waits
// for the rollout and records the revision; or, with --delete, removes the application. The
// order and the policy are release's; this prints.
func (c *applyCommand) apply(ctx context.Context, log *logrus.Logger) error {
	if c.Timeout <= 0 {
		return fault.BadInput(fmt.Errorf("--timeout must be a positive duration (90s, 12m, 1h30m), not %s", c.Timeout))
	}
	rel, err := c.conductor(log)
	if err != nil {
		return err
	}
	out := c.stdout()
	var result *release.Outcome
	switch {
	case c.Rollback:
		result, err = c.rollback(ctx, rel)
	default:
		var objects []*unstructured.Unstructured
		if objects, err = c.objects(ctx); err != nil {
			return c.exitError(err)
		}
		log.Debugf("applying %d objects to namespace %s", len(objects), rel.ApplyOptions.Namespace)
		if c.Delete {
			result, err = rel.Delete(ctx, objects)
		} else {
			result, err = rel.Apply(ctx, objects)
		}
	}
	if result != nil {
		c.printJSON(out, result)
	}
	if err == nil && result != nil && result.Revision != nil && c.Output == cli.Text {
		fmt.Fprintf(out, "revision %d recorded\n", result.Revision.Number)
	}
	return err
}

// rollback applies --rollback's revision of the application again.
func (c *applyCommand) rollback(ctx context.Context, rel *release.Release) (*release.Outcome, error) {
	set, err := rel.Application(ctx, c.Name, c.kustomization())
	if err != nil {
		return nil, err
	}
	return rel.Rollback(ctx, set, c.revisionNumber())
}

// conductor is the conductor of this run, on the run's one client: every mode goes through it.
func (c *applyCommand) conductor(log *logrus.Logger) (*release.Release, error) {
	k, namespace, err := c.client()
	if err != nil {
		return nil, err
	}
	log.Debugf("namespace %s of %s", namespace, k.Host)
	view := newProgress(os.Stderr, c.Output == cli.Text && cli.IsTerminal(os.Stderr))
	return &release.Release{
		Steps: &release.OnCluster{Client: k, WaitOptions: release.WaitOptions{OnStatus: view.update}, Warnf: log.Warnf},
		Options: release.Options{
			ApplyOptions: release.ApplyOptions{
				Namespace: namespace,
				Force:     c.ForceConflicts,
				DryRun:    c.DryRun == "server",
				Prune:     c.Prune,
				Version:   toolVersion(),
				Logf:      log.Debugf,
			},
			Timeout:           c.Timeout,
			RollbackOnFailure: c.RollbackOnFail,
			HistoryMax:        c.HistoryMax,
			Explain:           c.explainer(),
			OnApplied: func(res *release.Result) {
				view.expect(res)
				c.report(c.stdout(), res)
				warnHelm(log, res)
			},
			Warnf: log.Warnf,
		},
	}, nil
}

// revisionNumber is --rollback's REVISION, 0 for the previous one.
func (c *applyCommand) revisionNumber() int {
	n := 0
	if c.Dir != "" {
		n, _ = strconv.Atoi(c.Dir) // validate checked it
	}
	return n
}

// objects are the kustomization's, rendered in memory, within --timeout.
func (c *applyCommand) objects(ctx context.Context) ([]*unstructured.Unstructured, error) {
	dir := c.dir()
	if info, err := os.Stat(dir); err != nil || !info.IsDir() {
		return nil, fault.BadInput(fmt.Errorf("%s is not a folder: give the kustomization's folder, the one toa-push -k wrote (default: deployment)", dir))
	}
	if _, ok := ctx.Deadline(); !ok && c.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.Timeout)
		defer cancel()
	}
	objects, err := kustomize.Render(ctx, kustomize.OnDisk(), dir)
	if errors.Is(err, context.DeadlineExceeded) {
		return nil, fmt.Errorf("%w (--timeout %s)", err, c.Timeout)
	}
	return objects, err
}

// cluster loads the client configuration as kubectl does (cluster.Load), every request bounded
// by --request-timeout.
func (c *applyCommand) cluster() (*rest.Config, string, error) {
	t, err := cluster.Load(cluster.Kubeconfig{Path: c.Kubeconfig, Context: c.Context, Namespace: c.Namespace})
	if err != nil {
		return nil, "", err
	}
	c.credentials = t.Credentials
	t.Config.UserAgent = "toa-apply/" + toolVersion()
	return cluster.WithRequestTimeout(t.Config, c.RequestTimeout), t.Namespace, nil
}

// client is the run's one client, and the namespace to apply to.
func (c *applyCommand) client() (*cluster.Client, string, error) {
	cfg, namespace, err := c.cluster()
	if err != nil {
		return nil, "", err
	}
	k, err := cluster.New(cfg)
	return k, namespace, err
}

// exitError gives errors the words and exit codes of DESIGN.md (release.Explainer).
func (c *applyCommand) exitError(err error) error { return c.explainer().Explain(err) }

func (c *applyCommand) explainer() release.Explainer {
	return release.Explainer{Credentials: c.credentials, Timeout: c.Timeout}
}

// report prints what was applied, pruned, adopted or deleted, as kubectl does; nothing with
// -o json, which prints one document when the run ends.
func (c *applyCommand) report(w io.Writer, res *release.Result) {
	if res == nil {
		return
	}
	if c.Output == cli.JSON {
		return // one document at the end: printJSON
	}
	suffix := ""
	if res.DryRun {
		suffix = " (server dry run)"
	}
	adopted := map[string]bool{}
	for _, r := range res.Adopted {
		adopted[r.String()] = true
	}
	for _, a := range res.Applied {
		line := a.Ref.String() + " " + string(a.Change)
		if adopted[a.Ref.String()] {
			line += ", adopted from Helm"
		}
		fmt.Fprintln(w, line+suffix)
	}
	for _, r := range res.Pruned {
		fmt.Fprintln(w, r.String()+" pruned"+suffix)
	}
	for _, r := range res.Deleted {
		fmt.Fprintln(w, r.String()+" deleted"+suffix)
	}
}

// warnHelm tells that the Helm release whose objects were adopted still exists as Secrets, and
// what `helm uninstall` would do now.
func warnHelm(log *logrus.Logger, res *release.Result) {
	if res == nil {
		return
	}
	for _, r := range res.Helm {
		if r.Name == "" {
			log.Warn("objects labelled app.kubernetes.io/managed-by=Helm without a release name were adopted")
			continue
		}
		if len(r.Secrets) == 0 {
			log.Warnf("objects of Helm release %s were adopted; no release Secret of it is left in namespace %s", r.Name, r.Namespace)
			continue
		}
		log.Warnf("objects of Helm release %s are now toa-apply's; the release's Secrets remain in namespace %s (%s): "+
			"do not run `helm uninstall %s`, it would delete the application; remove the Secrets with "+
			"`kubectl delete secret -n %s -l owner=helm,name=%s`",
			r.Name, r.Namespace, strings.Join(r.Secrets, ", "), r.Name, r.Namespace, r.Name)
	}
}

// progress shows what the wait is waiting for, a line per awaited object (cli.Display): redrawn
// in place on a terminal, a plain line per change elsewhere (CI logs, -o json), each with the time
// since the wait began. On a terminal, more objects than fit a screen (a large application's
// thousand Deployments) are one line of counts instead, with the latest news and each failure.
type progress struct {
	display *cli.Display
	live    bool
	start   time.Time

	mu       sync.Mutex
	summary  bool            // one line of counts, not a line per object
	statuses map[string]bool // by object: done
}

// liveLines is how many objects a terminal shows a line each.
const liveLines = 20

func newProgress(w *os.File, live bool) *progress {
	d := cli.NewPlainDisplay(w)
	if live {
		d = cli.NewDisplay(w)
	}
	return &progress{display: d, live: live, start: time.Now(), statuses: map[string]bool{}}
}

// expect says what the next wait awaits, before it begins.
func (p *progress) expect(res *release.Result) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.summary = p.live && res.Awaits() > liveLines
}

func (p *progress) update(s release.Status) {
	mark := ""
	switch {
	case s.Failure != nil:
		mark = "✗ "
	case s.Done:
		mark = "✓ "
	}
	elapsed := time.Since(p.start).Seconds()
	p.mu.Lock()
	summary := p.summary
	p.statuses[s.Object()] = s.Done
	done := 0
	for _, d := range p.statuses {
		if d {
			done++
		}
	}
	total := len(p.statuses)
	p.mu.Unlock()
	if !summary || s.Failure != nil {
		p.display.Set(s.Object(), fmt.Sprintf("%s%s [%.1fs]", mark, s.Message, elapsed))
		return
	}
	p.display.Set("rollout", fmt.Sprintf("%d of %d done [%.1fs]; %s: %s%s", done, total, elapsed, s.Object(), mark, s.Message))
}
