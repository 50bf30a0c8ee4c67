package release

import (
	"context"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/toa-deploy/toa-deploy/internal/apply/diff"
	"github.com/toa-deploy/toa-deploy/internal/apply/revision"
	"github.com/toa-deploy/toa-deploy/internal/fault"
	"github.com/toa-deploy/toa-deploy/rollout"
)

// What a caller of release reads and sets of rollout, as release's own names, so that
// cmd/toa-apply talks to one room (as package os names io/fs's FileMode): the apply's options
// and result, and the wait's options and the status of each awaited object.
type (
	ApplyOptions = rollout.Options
	WaitOptions  = rollout.WaitOptions
	Result       = rollout.Result
	Status       = rollout.Status
)

// Application is the application a run reads (--history, --rollback, --diff --rollback): the
// one named (--name), else the one the kustomization's objects belong to (objects nil when
// there is no kustomization), else the only one in the namespace.
func (r *Release) Application(ctx context.Context, name string, objects func(context.Context) ([]*unstructured.Unstructured, error)) (rollout.Set, error) {
	namespace := r.ApplyOptions.Namespace
	if name != "" {
		return rollout.NewSet(name, namespace), nil
	}
	if objects != nil {
		objs, err := objects(ctx)
		if err != nil {
			return rollout.Set{}, r.Explain.Explain(err)
		}
		set, err := rollout.SetOf(objs, namespace)
		return set, r.Explain.Explain(err)
	}
	apps, err := r.Steps.Applications(ctx, namespace)
	switch {
	case err != nil:
		return rollout.Set{}, r.Explain.Explain(err)
	case len(apps) == 0:
		return rollout.Set{}, fault.BadInputf("toa-apply has applied no application to namespace %s: give -n NAMESPACE or --name CONTEXT", namespace)
	case len(apps) > 1:
		return rollout.Set{}, fault.BadInputf("namespace %s has %d applications (%s): give --name CONTEXT", namespace, len(apps), strings.Join(apps, ", "))
	}
	return rollout.NewSet(apps[0], namespace), nil
}

// History is the application's revisions, and the Secrets that look like revisions and are not
// ones toa-apply recorded.
func (r *Release) History(ctx context.Context, set rollout.Set) (revision.History, error) {
	h, err := r.Steps.History(ctx, set)
	return h, r.Explain.Explain(err)
}

// Diff is what applying the objects would change, as kubectl diff shows it: a server-side dry
// run, prune included, under no lease.
func (r *Release) Diff(ctx context.Context, objects []*unstructured.Unstructured) ([]diff.ObjectDiff, error) {
	return r.dryDiff(ctx, objects, false)
}

// DiffRollback is what Rollback(set, n) would change.
func (r *Release) DiffRollback(ctx context.Context, set rollout.Set, n int) ([]diff.ObjectDiff, error) {
	_, objects, err := r.Revision(ctx, set, n)
	if err != nil {
		return nil, r.Explain.Explain(err)
	}
	return r.dryDiff(ctx, objects, true)
}

func (r *Release) dryDiff(ctx context.Context, objects []*unstructured.Unstructured, onlyOwn bool) ([]diff.ObjectDiff, error) {
	opts := r.ApplyOptions
	opts.DryRun, opts.OnlyOwn = true, onlyOwn
	res, err := r.Steps.Apply(ctx, objects, opts)
	if err != nil {
		return nil, r.Explain.Explain(err)
	}
	return diff.Diffs(res)
}
