package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"strings"
	"time"

	"github.com/sirupsen/logrus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/toa-deploy/toa-deploy/fault"
	"github.com/toa-deploy/toa-deploy/internal/cli"
	"github.com/toa-deploy/toa-deploy/kustomize"
	"github.com/toa-deploy/toa-deploy/rollout"
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
// for the rollout and records the revision; or, with --delete, removes the application.
func (c *applyCommand) apply(ctx context.Context, log *logrus.Logger) error {
	if c.Timeout <= 0 {
		return fault.BadInput(fmt.Errorf("--timeout must be a positive duration (90s, 12m, 1h30m), not %s", c.Timeout))
	}
	cfg, namespace, err := c.cluster()
	if err != nil {
		return err
	}
	opts := rollout.Options{
		Namespace: namespace,
		Force:     c.ForceConflicts,
		DryRun:    c.DryRun == "server",
		Prune:     c.Prune,
		Version:   toolVersion(),
		Logf:      log.Debugf,
	}
	deadline, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()
	objects, description, err := c.source(deadline, cfg, namespace)
	if err != nil {
		return c.exitError(err)
	}
	out := c.stdout()

	if c.Delete {
		res, err := rollout.Delete(deadline, cfg, objects, opts)
		c.report(out, res)
		c.printJSON(out, output{Result: res})
		return c.exitError(err)
	}
	log.Debugf("applying %d objects to namespace %s of %s", len(objects), namespace, cfg.Host)
	res, err := rollout.Apply(deadline, cfg, objects, opts)
	c.report(out, res)
	warnHelm(log, res)
	if err != nil || opts.DryRun {
		result := output{Result: res}
		err = c.exitError(err)
		var partly *rollout.PartlyAppliedError
		if c.RollbackOnFail && errors.As(err, &partly) {
			// the cluster holds part of the new application: back to the last whole one
			result.Rollback, err = c.rollbackAfter(ctx, log, cfg, res.Set, opts, err)
		}
		c.printJSON(out, result)
		return err
	}
	result := output{Result: res, Rollout: &outcome{}}
	err = c.wait(deadline, cfg, res)
	result.Rollout.set(err)
	if err != nil {
		err = c.exitError(err)
		if c.RollbackOnFail {
			result.Rollback, err = c.rollbackAfter(ctx, log, cfg, res.Set, opts, err)
		}
		c.printJSON(out, result)
		return err
	}
	result.Revision, err = c.record(ctx, cfg, res.Set, objects, description)
	c.printJSON(out, result)
	if err != nil {
		return fmt.Errorf("applied and rolled out, but: %w", err)
	}
	if c.Output == cli.Text {
		fmt.Fprintf(out, "revision %d recorded\n", result.Revision.Number)
	}
	return nil
}

// wait waits for the rollout, showing its progress.
func (c *applyCommand) wait(ctx context.Context, cfg *rest.Config, res *rollout.Result) error {
	view := newProgress(os.Stderr, c.Output == cli.Text && cli.IsTerminal(os.Stderr))
	return rollout.Wait(ctx, cfg, res, rollout.WaitOptions{OnStatus: view.update})
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

// cluster loads the client configuration as kubectl does: --kubeconfig, else KUBECONFIG, else
// ~/.kube/config, else the pod's in-cluster configuration; --context picks the context; the
// namespace is -n, else the context's, else default (in a pod, the pod's).
func (c *applyCommand) cluster() (*rest.Config, string, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = c.Kubeconfig
	overrides := &clientcmd.ConfigOverrides{CurrentContext: c.Context}
	overrides.Context.Namespace = c.Namespace
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, overrides)
	cfg, err := cc.ClientConfig()
	if err != nil {
		hint := ""
		if clientcmd.IsEmptyConfig(err) {
			hint = ": give --kubeconfig, set KUBECONFIG, or run in a pod"
		}
		return nil, "", fault.BadInput(fmt.Errorf("kubeconfig: %w%s", err, hint))
	}
	namespace, _, err := cc.Namespace()
	if err != nil {
		return nil, "", fault.BadInput(fmt.Errorf("kubeconfig: namespace: %w", err))
	}
	if namespace == "" {
		namespace = "default"
	}
	c.credentials = credentialsOf(cc, rules, cfg)
	cfg.UserAgent = "toa-apply/" + toolVersion()
	return rollout.WithRequestTimeout(cfg, c.RequestTimeout), namespace, nil
}

// credentialsOf names where the client's credentials come from, for a server that refuses them:
// the user of the context in the kubeconfig file, or the pod's service account.
func credentialsOf(cc clientcmd.ClientConfig, rules *clientcmd.ClientConfigLoadingRules, cfg *rest.Config) string {
	raw, err := cc.RawConfig()
	if err != nil || len(raw.Contexts) == 0 {
		return "the pod's service account token (in-cluster configuration)"
	}
	name := raw.CurrentContext
	if ctx := raw.Contexts[name]; ctx != nil {
		file := rules.GetDefaultFilename()
		if ctx.LocationOfOrigin != "" {
			file = ctx.LocationOfOrigin
		}
		return fmt.Sprintf("user %q of context %q in %s", ctx.AuthInfo, name, file)
	}
	return "the credentials for " + cfg.Host
}

// exitError gives rollout's errors the exit codes of DESIGN.md.
func (c *applyCommand) exitError(err error) error {
	var input *fault.Input
	var awaiting *rollout.Awaiting
	var failure *rollout.Failure
	var noAnswer *rollout.NoAnswer
	switch {
	case err == nil:
		return nil
	case errors.As(err, &input):
		return err
	case apierrors.IsUnauthorized(err):
		return fmt.Errorf("%w\n  the API server did not accept %s: check its token or client certificate "+
			"(it may have expired; an exec or auth-provider plugin may need a new login); "+
			"`kubectl auth whoami` with the same kubeconfig and context shows what the server sees", err, c.credentials)
	case apierrors.IsForbidden(err):
		return fmt.Errorf("%w\n  the API server knows %s but does not allow this: check the Roles and "+
			"RoleBindings of that user in the namespace (toa-apply needs get, list, watch, patch and delete "+
			"on the application's kinds, and on Secrets for its inventory); `kubectl auth can-i --list -n NAMESPACE` shows what it may do", err, c.credentials)
	case errors.As(err, &noAnswer):
		return fault.TimedOut(err)
	case errors.As(err, &awaiting):
		var pods []rollout.PodReport
		for _, s := range awaiting.Objects {
			pods = append(pods, s.Pods...)
		}
		return fault.TimedOut(fmt.Errorf("%w (--timeout %s)%s", err, c.Timeout, explanation(pods)))
	case errors.Is(err, context.DeadlineExceeded):
		return fault.TimedOut(fmt.Errorf("--timeout %s passed before the apply finished: %w", c.Timeout, err))
	case errors.As(err, &failure):
		return fmt.Errorf("rollout failed: %w%s", err, explanation(failure.Pods))
	}
	return err
}

// explanation is the text of pod reports under an error, "" for none.
func explanation(pods []rollout.PodReport) string {
	if len(pods) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteByte('\n')
	rollout.WritePods(&b, pods, time.Now())
	return strings.TrimRight(b.String(), "\n")
}

// report prints what was applied, pruned, adopted or deleted, as kubectl does; nothing with
// -o json, which prints one document when the run ends.
func (c *applyCommand) report(w io.Writer, res *rollout.Result) {
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
func warnHelm(log *logrus.Logger, res *rollout.Result) {
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

// progress shows what the wait is waiting for, a line per Deployment (cli.Display): redrawn in
// place on a terminal, a plain line per change elsewhere (CI logs, -o json), each with the time
// since the wait began.
type progress struct {
	display *cli.Display
	start   time.Time
}

func newProgress(w *os.File, live bool) *progress {
	d := cli.NewPlainDisplay(w)
	if live {
		d = cli.NewDisplay(w)
	}
	return &progress{display: d, start: time.Now()}
}

func (p *progress) update(s rollout.Status) {
	mark := ""
	switch {
	case s.Failure != nil:
		mark = "✗ "
	case s.Done:
		mark = "✓ "
	}
	p.display.Set(s.Object(), fmt.Sprintf("%s%s [%.1fs]", mark, s.Message, time.Since(p.start).Seconds()))
}
