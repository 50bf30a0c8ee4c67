// Package release is toa-apply's conductor, as pipeline is toa-push's: what one run does with an
// application on the cluster, and in which order. It takes the application's lease, so that one
// run at a time changes it; refuses a namespace being deleted before anything is applied;
// applies, waits and records the revision (deployed, or failed when the API server refused the
// apply part-way or the rollout failed); with --rollback-on-failure goes back to the latest
// deployed revision; rolls back to a revision and deletes the application. What a rollback
// applies is the revision's objects, only where the application holds them (rollout.Options.OnlyOwn).
// It also reads for the command what --history, --diff and --rollback need (read.go): which
// application, its revisions, what an apply or a rollback would change.
//
// The moves on the cluster are Steps, so that this policy is tested against fakes (release_test)
// as well as on the control plane (cmd/toa-apply). Every mode of toa-apply goes through it:
// cmd/toa-apply parses flags and prints what it returns, and imports neither rollout nor
// revision (its TestOneConductor).
package release

import (
	"context"
	"errors"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/toa-deploy/toa-deploy/internal/apply/revision"
	"github.com/toa-deploy/toa-deploy/rollout"
	"github.com/toa-deploy/toa-deploy/rollout/status"
)

// Steps are the conductor's moves on the cluster: OnCluster's, or a test's fakes.
type Steps interface {
	// CheckNamespaces refuses namespaces being deleted.
	CheckNamespaces(ctx context.Context, namespaces ...string) error
	// Lock takes the application's lease, held until unlock.
	Lock(ctx context.Context, set rollout.Set) (unlock func(), err error)
	Apply(ctx context.Context, objects []*unstructured.Unstructured, opts rollout.Options) (*rollout.Result, error)
	Wait(ctx context.Context, res *rollout.Result) error
	Delete(ctx context.Context, objects []*unstructured.Unstructured, opts rollout.Options) (*rollout.Result, error)
	// DeleteRevisions deletes the application's revisions, after the application.
	DeleteRevisions(ctx context.Context, set rollout.Set) error
	History(ctx context.Context, set rollout.Set) (revision.History, error)
	// Applications are the Toa contexts toa-apply has applied to the namespace.
	Applications(ctx context.Context, namespace string) ([]string, error)
	// Objects decodes a revision History listed.
	Objects(rev revision.Revision) ([]*unstructured.Unstructured, error)
	Record(ctx context.Context, set rollout.Set, objects []*unstructured.Unstructured, opts revision.RecordOptions) (revision.Revision, error)
}

// Options tune a run.
type Options struct {
	// ApplyOptions are rollout's: the namespace, prune, force, dry run, toa-apply's version.
	ApplyOptions rollout.Options
	// Timeout bounds the apply and the wait (--timeout); a rollback after a failure has one of
	// its own.
	Timeout time.Duration
	// RollbackOnFailure goes back to the latest deployed revision when the rollout fails or
	// times out, or the apply stops part-way.
	RollbackOnFailure bool
	// HistoryMax is how many revisions are kept.
	HistoryMax int
	// Explain gives errors the words and exit classes of toa-apply (Explainer.Explain).
	Explain Explainer
	// OnApplied hears each apply's result as soon as it is known (the run's, a rollback's).
	OnApplied func(*rollout.Result)
	// Warnf hears what the user should know and that does not fail the run.
	Warnf func(format string, args ...any)
}

// Release conducts runs with an application.
type Release struct {
	Steps Steps
	Options
}

// Outcome is what a run did: the apply's result, the rollout's outcome, the revision recorded,
// and a rollback after a failure. toa-apply -o json prints it.
type Outcome struct {
	*rollout.Result
	Rollout  *Rollout           `json:"rollout,omitempty"`
	Revision *revision.Revision `json:"revision,omitempty"`
	Rollback *Rollback          `json:"rollback,omitempty"`
}

// Rollout is how the wait ended.
type Rollout struct {
	Done     bool             `json:"done"`
	Failure  *status.Failure  `json:"failure,omitempty"`
	Awaiting []rollout.Status `json:"timedOutAwaiting,omitempty"` // what was awaited when --timeout passed
	Error    string           `json:"error,omitempty"`
}

func (o *Rollout) set(err error) {
	var f *status.Failure
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

// Rollback is a rollback after a failure.
type Rollback struct {
	To       int                `json:"to"`
	Done     bool               `json:"done"`
	Revision *revision.Revision `json:"revision,omitempty"`
	Error    string             `json:"error,omitempty"`
}

func (r *Release) applied(res *rollout.Result) {
	if r.OnApplied != nil && res != nil {
		r.OnApplied(res)
	}
}

func (r *Release) warnf(format string, args ...any) {
	if r.Warnf != nil {
		r.Warnf(format, args...)
	}
}

// source is what a run applies, and how its revision is described.
type source func(ctx context.Context) ([]*unstructured.Unstructured, string, error)

// Apply applies the kustomization's objects as the application's next revision.
func (r *Release) Apply(ctx context.Context, objects []*unstructured.Unstructured) (*Outcome, error) {
	set, err := rollout.SetOf(objects, r.ApplyOptions.Namespace)
	if err != nil {
		return nil, r.Explain.Explain(err)
	}
	return r.run(ctx, set, func(context.Context) ([]*unstructured.Unstructured, string, error) { return objects, "apply", nil }, false)
}

// Rollback applies revision n of the application again (0: the latest deployed one before the
// latest), only where the application holds its objects.
func (r *Release) Rollback(ctx context.Context, set rollout.Set, n int) (*Outcome, error) {
	return r.run(ctx, set, func(ctx context.Context) ([]*unstructured.Unstructured, string, error) {
		rev, objects, err := r.Revision(ctx, set, n)
		return objects, fmt.Sprintf("rollback to %d", rev.Number), err
	}, true)
}

// Revision is revision n of the application (see revision.History.Pick) and its objects.
func (r *Release) Revision(ctx context.Context, set rollout.Set, n int) (revision.Revision, []*unstructured.Unstructured, error) {
	h, err := r.Steps.History(ctx, set)
	if err != nil {
		return revision.Revision{}, nil, err
	}
	rev, err := h.Pick(set, n)
	if err != nil {
		return rev, nil, err
	}
	objects, err := r.Steps.Objects(rev)
	return rev, objects, err
}

// run applies what src gives, under the application's lease: apply, wait, record; on a failure
// the failed revision, and with RollbackOnFailure the rollback.
func (r *Release) run(ctx context.Context, set rollout.Set, src source, onlyOwn bool) (*Outcome, error) {
	opts := r.ApplyOptions
	opts.OnlyOwn = onlyOwn
	if opts.DryRun {
		objects, _, err := src(ctx)
		if err != nil {
			return nil, r.Explain.Explain(err)
		}
		res, err := r.Steps.Apply(ctx, objects, opts)
		r.applied(res)
		return &Outcome{Result: res}, r.Explain.Explain(err)
	}
	if err := r.Steps.CheckNamespaces(ctx, set.Namespace); err != nil {
		return nil, r.Explain.Explain(err)
	}
	unlock, err := r.Steps.Lock(ctx, set)
	if err != nil {
		return nil, r.Explain.Explain(err)
	}
	defer unlock()
	deadline, cancel := context.WithTimeout(ctx, r.Timeout)
	defer cancel()
	objects, description, err := src(deadline)
	if err != nil {
		return nil, r.Explain.Explain(err)
	}
	// an application too large to record is refused before anything of it is applied
	if err := revision.Check(objects); err != nil {
		return nil, r.Explain.Explain(fmt.Errorf("%w; nothing was applied", err))
	}
	if err := r.Steps.CheckNamespaces(deadline, namespacesOf(objects)...); err != nil {
		return nil, r.Explain.Explain(err)
	}
	res, err := r.Steps.Apply(deadline, objects, opts)
	r.applied(res)
	out := &Outcome{Result: res}
	if err != nil {
		err = r.Explain.Explain(err)
		var partly *rollout.PartlyAppliedError
		if !errors.As(err, &partly) {
			return out, err // nothing changed on the cluster, or nothing of the set
		}
		return out, r.failed(ctx, set, out, objects, description, err)
	}
	out.Rollout = &Rollout{}
	err = r.Steps.Wait(deadline, res)
	out.Rollout.set(err)
	if err != nil {
		return out, r.failed(ctx, set, out, objects, description, r.Explain.Explain(err))
	}
	rev, err := r.record(ctx, set, objects, description, revision.Deployed)
	out.Revision = rev
	if err != nil {
		return out, fmt.Errorf("applied and rolled out, but: %w", err)
	}
	return out, nil
}

// failed records the failed apply as a failed revision and, with RollbackOnFailure, rolls back
// to the latest deployed one. The error stays the failure's (its exit code too), with what the
// record and the rollback did.
func (r *Release) failed(ctx context.Context, set rollout.Set, out *Outcome, objects []*unstructured.Unstructured, description string, failure error) error {
	rev, err := r.record(ctx, set, objects, description, revision.Failed)
	out.Revision = rev
	if err != nil {
		failure = fmt.Errorf("%w\n  the failed revision was not recorded: %s", failure, err.Error())
	}
	if !r.RollbackOnFailure {
		return failure
	}
	out.Rollback, failure = r.rollbackAfter(ctx, set, failure)
	return failure
}

// record keeps the objects as a new revision; its own bound, as the apply's --timeout may be
// spent.
func (r *Release) record(ctx context.Context, set rollout.Set, objects []*unstructured.Unstructured, description string, status revision.Status) (*revision.Revision, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	rev, err := r.Steps.Record(ctx, set, objects, revision.RecordOptions{Description: description, Version: r.ApplyOptions.Version, Max: r.HistoryMax, Status: status})
	if err != nil {
		return nil, err
	}
	return &rev, nil
}

// rollbackAfter applies the latest deployed revision after a failed apply and waits for it,
// with a --timeout of its own, and records it.
func (r *Release) rollbackAfter(ctx context.Context, set rollout.Set, failed error) (*Rollback, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.Timeout)
	defer cancel()
	h, err := r.Steps.History(ctx, set)
	if err != nil {
		return nil, fmt.Errorf("%w\n  --rollback-on-failure: %s", failed, err.Error())
	}
	prev, ok := h.LatestDeployed()
	if !ok {
		return nil, fmt.Errorf("%w\n  --rollback-on-failure: no deployed revision to roll back to: the application is left as the failed apply left it", failed)
	}
	rb := &Rollback{To: prev.Number}
	r.warnf("the apply failed; rolling back to revision %d", prev.Number)
	objects, err := r.Steps.Objects(prev)
	if err == nil {
		opts := r.ApplyOptions
		opts.OnlyOwn = true
		var res *rollout.Result
		res, err = r.Steps.Apply(ctx, objects, opts)
		r.applied(res)
		if err == nil {
			err = r.Steps.Wait(ctx, res)
		}
	}
	if err != nil {
		rb.Error = err.Error()
		return rb, fmt.Errorf("%w\n  --rollback-on-failure: the rollback to revision %d did not finish: %s", failed, prev.Number, err.Error())
	}
	rb.Done = true
	rb.Revision, err = r.record(ctx, set, objects, fmt.Sprintf("rollback to %d after a failed apply", prev.Number), revision.Deployed)
	if err != nil {
		rb.Error = err.Error()
	}
	return rb, fmt.Errorf("%w\n  --rollback-on-failure: rolled back to revision %d: its pods are ready and the replaced ones gone", failed, prev.Number)
}

// Delete removes the whole application the objects belong to, and its revisions, under its
// lease.
func (r *Release) Delete(ctx context.Context, objects []*unstructured.Unstructured) (*Outcome, error) {
	set, err := rollout.SetOf(objects, r.ApplyOptions.Namespace)
	if err != nil {
		return nil, r.Explain.Explain(err)
	}
	if !r.ApplyOptions.DryRun {
		unlock, err := r.Steps.Lock(ctx, set)
		if err != nil {
			return nil, r.Explain.Explain(err)
		}
		defer unlock()
	}
	deadline, cancel := context.WithTimeout(ctx, r.Timeout)
	defer cancel()
	res, err := r.Steps.Delete(deadline, objects, r.ApplyOptions)
	r.applied(res)
	if err == nil && !r.ApplyOptions.DryRun {
		err = r.Steps.DeleteRevisions(deadline, set)
	}
	return &Outcome{Result: res}, r.Explain.Explain(err)
}

// namespacesOf are the namespaces objects name.
func namespacesOf(objects []*unstructured.Unstructured) []string {
	var out []string
	for _, obj := range objects {
		if ns := obj.GetNamespace(); ns != "" {
			out = append(out, ns)
		}
	}
	return out
}
