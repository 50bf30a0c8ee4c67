package rollout

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	kube "github.com/toa-deploy/toa-deploy/internal/cluster"
	"github.com/toa-deploy/toa-deploy/internal/fault"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
)

// Options tune Apply and Delete.
type Options struct {
	// Namespace is the namespace applied to: objects without one go there, and so does the
	// ApplySet's parent. Required.
	Namespace string
	// Force takes the fields other field managers own (--force-conflicts).
	Force bool
	// DryRun applies with dryRun=All: the server says what would change, and nothing does.
	DryRun bool
	// Prune deletes the members of the set the objects no longer have.
	Prune bool
	// Version is toa-apply's, written into the parent's tooling annotation.
	Version string
	// OnlyOwn applies objects only where the application already holds them or may create
	// them: an object of the namespace applied to that does not exist yet, or an object that
	// exists and is a member of the set. A cluster-scoped object or one in another namespace that
	// the set does not hold, and an existing object that is not the set's (a Helm release's
	// included), are refused before anything is applied (*notHeldError). A rollback applies
	// with OnlyOwn: what a revision holds is never trusted to take what the application never had.
	OnlyOwn bool
	// Logf, when set, hears each step.
	Logf func(format string, args ...any)
}

func (o Options) logf(format string, args ...any) {
	if o.Logf != nil {
		o.Logf(format, args...)
	}
}

// Apply server-side applies objects with field manager "toa", in DESIGN.md's order, as members
// of the application's ApplySet, and prunes what the set had and the objects lack. Objects a
// Helm release made are adopted. The objects are not changed.
//
// A field another manager owns with another value is a *ConflictError, unless opts.Force;
// objects the cluster cannot take are an *fault.Input.
func Apply(ctx context.Context, k *kube.Client, objects []*unstructured.Unstructured, opts Options) (*Result, error) {
	return applyWith(ctx, clientOf(k), objects, opts)
}

func applyWith(ctx context.Context, c *client, objects []*unstructured.Unstructured, opts Options) (*Result, error) {
	set, err := setOf(objects, opts.Namespace)
	if err != nil {
		return nil, err
	}
	a := &applier{c: c, opts: opts, set: set, res: &Result{Set: set, DryRun: opts.DryRun},
		releases: map[string]*HelmRelease{}}
	objects = members(objects, set)
	if opts.OnlyOwn {
		if err := a.held(ctx, objects); err != nil {
			return a.res, err
		}
	}
	err = a.run(ctx, objects)
	if err == nil || opts.DryRun || len(a.res.Applied) == 0 {
		return a.res, err // nothing changed on the cluster, or all of it did
	}
	return a.res, a.partly(objects, err)
}

// partly is the error of a run that stopped after it applied some objects: the ones it did not
// reach are named, in Result.NotApplied and in the message. A run that applied everything and
// failed after (prune, the parent's record) is not partly applied: its error stands alone.
func (a *applier) partly(objects []*unstructured.Unstructured, err error) error {
	done := map[string]bool{}
	for _, o := range a.res.Applied {
		done[o.key()] = true
	}
	for _, obj := range objects {
		if r := refOf(obj); !done[r.key()] {
			a.res.NotApplied = append(a.res.NotApplied, r)
		}
	}
	if len(a.res.NotApplied) == 0 {
		return err
	}
	return &PartlyAppliedError{Applied: len(a.res.Applied), Total: len(objects), NotApplied: a.res.NotApplied, Err: err}
}

// SetOf is the ApplySet of the objects' Toa context in the namespace.
func SetOf(objects []*unstructured.Unstructured, namespace string) (Set, error) {
	return setOf(objects, namespace)
}

// setOf is the ApplySet of the objects' Toa context in the namespace.
func setOf(objects []*unstructured.Unstructured, namespace string) (Set, error) {
	if namespace == "" {
		return Set{}, fault.BadInput(errors.New("no namespace to apply to"))
	}
	name, err := contextName(objects)
	if err != nil {
		return Set{}, err
	}
	return NewSet(name, namespace), nil
}

// contextName is the toa/context label every object carries, the name of the application.
func contextName(objects []*unstructured.Unstructured) (string, error) {
	if len(objects) == 0 {
		return "", fault.BadInput(errors.New("the kustomization has no objects"))
	}
	name := ""
	var missing []string
	for _, obj := range objects {
		v := obj.GetLabels()[LabelContext]
		switch {
		case v == "":
			missing = append(missing, refOf(obj).String())
		case name == "":
			name = v
		case v != name:
			return "", fault.BadInput(fmt.Errorf("the objects belong to two Toa contexts, %q and %q (label %s): apply one application at a time", name, v, LabelContext))
		}
	}
	if len(missing) > 0 {
		return "", fault.BadInput(fmt.Errorf("%s lack the label %s that names the application: "+
			"an overlay must add it with a kustomize `labels` entry", strings.Join(missing, ", "), LabelContext))
	}
	return name, nil
}

// members are copies of the objects labelled as the set's: new top-level and metadata maps, the
// rest shared (Apply changes nothing below metadata), so that a large application is not held
// twice.
func members(objects []*unstructured.Unstructured, set Set) []*unstructured.Unstructured {
	out := make([]*unstructured.Unstructured, 0, len(objects))
	for _, obj := range objects {
		m := &unstructured.Unstructured{Object: maps.Clone(obj.Object)}
		if md, ok := obj.Object["metadata"].(map[string]any); ok {
			m.Object["metadata"] = maps.Clone(md)
		}
		labels := maps.Clone(obj.GetLabels())
		if labels == nil {
			labels = map[string]string{}
		}
		labels[LabelPartOf] = set.ID
		m.SetLabels(labels)
		out = append(out, m)
	}
	return out
}

type applier struct {
	c        *client
	crds     []string // the groups of the CRDs this run applied
	opts     Options
	set      Set
	res      *Result
	releases map[string]*HelmRelease // by namespace/name
	inv      inventory
}

// run follows kubectl's ApplySet protocol: the parent first records the union of what the set
// had and what it will have, so that an interrupted run leaks nothing; then the members are
// applied and what is no longer in the set is pruned; then the parent records the new set.
func (a *applier) run(ctx context.Context, objects []*unstructured.Unstructured) error {
	old, err := readParent(ctx, a.c, a.set)
	if err != nil {
		return err
	}
	kinds, namespaces := slices.Clone(old.kinds), slices.Clone(old.namespaces)
	for _, obj := range objects {
		kinds = append(kinds, obj.GroupVersionKind().GroupKind())
		if obj.GetNamespace() != "" {
			namespaces = append(namespaces, obj.GetNamespace())
		}
	}
	for i, objs := range byStage(objects) {
		if err := a.applyAll(ctx, objs); err != nil {
			return err
		}
		switch {
		case i == 0 && !a.opts.DryRun:
			// the namespaces the set may create come first: the parent may live in one
			if err := writeParent(ctx, a.c, a.set, kinds, namespaces, a.opts.Version); err != nil {
				return err
			}
		case i == stageCRD && len(objs) > 0:
			if err := a.established(ctx, objs); err != nil {
				return err
			}
		}
	}
	if a.opts.Prune {
		if err := a.prune(ctx, kinds, namespaces); err != nil {
			return err
		}
		kinds, namespaces = nil, nil
		for _, obj := range a.res.Applied {
			kinds = append(kinds, obj.GroupKind())
			namespaces = append(namespaces, obj.Namespace)
		}
	}
	if !a.opts.DryRun {
		if err := writeParent(ctx, a.c, a.set, kinds, namespaces, a.opts.Version); err != nil {
			return err
		}
	}
	return a.reportReleases(ctx)
}

// pending is an object about to be applied, with its resource and what the LIST found of it.
type pending struct {
	obj     *unstructured.Unstructured
	mapping *meta.RESTMapping
	live    *found // nil: it does not exist
}

// outcome is what applying one object did.
type outcome struct {
	ref     Ref
	applied *Applied
	adopted *HelmRelease
	err     error
}

// applyAll applies the objects of one stage: independent of each other, so at once, as many in
// flight as the run's client allows (cluster.MaxInFlight), each with one PATCH. The first
// failure, in the objects' order, stops what has not begun; what is in flight finishes, so that
// Result.Applied says exactly what the cluster took.
func (a *applier) applyAll(ctx context.Context, objects []*unstructured.Unstructured) error {
	if len(objects) == 0 {
		return nil
	}
	targets, err := a.pending(ctx, objects)
	if err != nil {
		return err
	}
	outcomes := make([]outcome, len(targets))
	var failed atomic.Bool
	var g errgroup.Group
	g.SetLimit(kube.MaxInFlight)
	for i, t := range targets {
		if failed.Load() {
			break
		}
		g.Go(func() error {
			outcomes[i] = a.apply(ctx, t)
			if outcomes[i].err != nil {
				failed.Store(true)
			}
			return nil
		})
	}
	_ = g.Wait()
	for _, o := range outcomes {
		if o.adopted != nil {
			// adopted even where the apply after was refused: Helm's metadata is gone from it
			a.res.Adopted = append(a.res.Adopted, o.ref)
			a.releases[o.adopted.Namespace+"/"+o.adopted.Name] = o.adopted
		}
		if o.applied != nil && o.err == nil {
			a.res.Applied = append(a.res.Applied, *o.applied)
		}
	}
	for _, o := range outcomes {
		if o.err != nil {
			return o.err
		}
	}
	return nil
}

// pending resolves the objects' resources, sets their namespaces, and lists each resource and
// namespace they go to that this run has not listed yet.
func (a *applier) pending(ctx context.Context, objects []*unstructured.Unstructured) ([]pending, error) {
	targets := make([]pending, len(objects))
	names := map[place]map[string]bool{}
	for i, obj := range objects {
		m, err := a.mapping(ctx, obj.GroupVersionKind())
		if err != nil {
			return nil, err
		}
		if m.Scope.Name() == meta.RESTScopeNameNamespace {
			if obj.GetNamespace() == "" {
				obj.SetNamespace(a.opts.Namespace)
			}
		} else {
			obj.SetNamespace("")
		}
		targets[i] = pending{obj: obj, mapping: m}
		p := place{m.Resource, obj.GetNamespace()}
		if names[p] == nil {
			names[p] = map[string]bool{}
		}
		names[p][obj.GetName()] = true
	}
	if err := a.listAll(ctx, targets, names); err != nil {
		return nil, err
	}
	for i, t := range targets {
		l, _ := a.inv.get(place{t.mapping.Resource, t.obj.GetNamespace()})
		targets[i].live = l.objects[t.obj.GetName()]
	}
	return targets, nil
}

// listAll lists, at once, each place of targets not listed yet.
func (a *applier) listAll(ctx context.Context, targets []pending, names map[place]map[string]bool) error {
	var g errgroup.Group
	g.SetLimit(kube.MaxInFlight)
	for _, t := range targets {
		p := place{t.mapping.Resource, t.obj.GetNamespace()}
		if _, ok := a.inv.get(p); ok {
			continue
		}
		a.inv.put(p, nil) // listed once, whatever the targets
		g.Go(func() error {
			l, err := list(ctx, a.c, a.set, t.mapping, p.namespace, names[p], a.opts.DryRun)
			if err != nil {
				return err
			}
			a.inv.put(p, l)
			return nil
		})
	}
	return g.Wait()
}

// apply server-side applies one object, adopting it first if a Helm release made it.
func (a *applier) apply(ctx context.Context, t pending) outcome {
	obj, ref := t.obj, refOf(t.obj)
	ri := a.c.resource(t.mapping, obj.GetNamespace())
	out := outcome{ref: ref}
	force, live := a.opts.Force, t.live
	if live != nil && live.helm != nil {
		release := live.helm
		if a.opts.DryRun {
			// the real run moves Helm's fields to toa before applying: no conflict with Helm
			force = true
		} else {
			adopted, err := adopt(ctx, ri, live.obj)
			if err != nil {
				out.err = fmt.Errorf("adopt %s from Helm release %s: %w", ref, live.helm.Name, err)
				return out
			}
			live = &found{uid: adopted.GetUID(), rv: adopted.GetResourceVersion(), member: live.member, sum: sumOf(adopted)}
		}
		out.adopted = release
		a.opts.logf("adopted %s from Helm release %s", ref, out.adopted.Name)
	}
	data, err := obj.MarshalJSON()
	if err != nil {
		out.err = fmt.Errorf("encode %s: %w", ref, err)
		return out
	}
	po := metav1.PatchOptions{FieldManager: FieldManager, Force: &force, FieldValidation: "Strict"}
	if a.opts.DryRun {
		po.DryRun = []string{metav1.DryRunAll}
	}
	answer, err := ri.Patch(ctx, obj.GetName(), types.ApplyPatchType, data, po)
	if err != nil {
		out.err = applyError(ref, err)
		return out
	}
	change := a.changeOf(live, answer)
	a.opts.logf("%s %s", ref, change)
	// what the apply's callers read of the answer (the wait, the diff) is not its managed fields,
	// often half of it
	answer.SetManagedFields(nil)
	applied := Applied{Ref: ref, Change: change, Object: answer}
	if a.opts.DryRun && live != nil {
		applied.Live = live.obj
	}
	out.applied = &applied
	return out
}

// applyError is an apply's refusal in the words of its cause.
func applyError(ref Ref, err error) error {
	if cs := conflicts(err); apierrors.IsConflict(err) && len(cs) > 0 {
		return &ConflictError{Object: ref, Conflicts: cs}
	}
	if apierrors.IsInvalid(err) || apierrors.IsBadRequest(err) {
		return fault.BadInput(fmt.Errorf("apply %s: %w", ref, err))
	}
	return fmt.Errorf("apply %s: %w", ref, err)
}

// changeOf says what the apply whose answer is after did to an object as the LIST found it: the
// same resourceVersion is the same object; another with the same fields is a write of status or
// bookkeeping by someone else. A dry run's answer keeps the live resourceVersion, so its fields
// are compared whole.
func (a *applier) changeOf(live *found, after *unstructured.Unstructured) Change {
	switch {
	case live == nil:
		return Created
	case a.opts.DryRun:
		return changeOf(live.obj, after)
	case live.rv == after.GetResourceVersion() || live.sum == sumOf(after):
		return Unchanged
	}
	return Configured
}

// changeOf compares an object before and after an apply, leaving out what changes without the
// object changing: managedFields, resourceVersion, generation, status.
func changeOf(before, after *unstructured.Unstructured) Change {
	if before == nil {
		return Created
	}
	if reflect.DeepEqual(WithoutBookkeeping(before), WithoutBookkeeping(after)) {
		return Unchanged
	}
	return Configured
}

// WithoutBookkeeping is a copy of obj's fields without status, managedFields, resourceVersion
// and generation: what two versions of an object are compared by.
func WithoutBookkeeping(obj *unstructured.Unstructured) map[string]any {
	c := obj.DeepCopy().Object
	delete(c, "status")
	if md, ok := c["metadata"].(map[string]any); ok {
		for _, k := range []string{"managedFields", "resourceVersion", "generation"} {
			delete(md, k)
		}
	}
	return c
}

// mapping is the resource of a kind. A kind of a CRD this run applied may be missing from
// discovery for a moment after the CRD is established: discovery is read again, a few times.
func (a *applier) mapping(ctx context.Context, gvk schema.GroupVersionKind) (*meta.RESTMapping, error) {
	m, err := a.c.mapping(gvk)
	var input *fault.Input
	if !errors.As(err, &input) || !slices.Contains(a.crds, gvk.Group) {
		return m, err
	}
	backoff := wait.Backoff{Duration: 50 * time.Millisecond, Factor: 2, Steps: 8} // about 13 s in all
	_ = wait.ExponentialBackoffWithContext(ctx, backoff, func(context.Context) (bool, error) {
		a.c.mapper.Reset()
		m, err = a.c.mapping(gvk)
		return !errors.As(err, &input), nil
	})
	return m, err
}

// established waits until the CRDs just applied are served.
func (a *applier) established(ctx context.Context, crds []*unstructured.Unstructured) error {
	if a.opts.DryRun {
		return nil
	}
	gvr := schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	for _, crd := range crds {
		group, _, _ := unstructured.NestedString(crd.Object, "spec", "group")
		a.crds = append(a.crds, group)
		a.opts.logf("waiting for %s to be established", refOf(crd))
		err := until(ctx, a.c.dyn, a.c.dyn.Resource(gvr), crd.GetName(), func(obj *unstructured.Unstructured) bool {
			conditions, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
			for _, c := range conditions {
				c, _ := c.(map[string]any)
				if c["type"] == "Established" && c["status"] == "True" {
					return true
				}
			}
			return false
		})
		if err != nil {
			return fmt.Errorf("wait for %s to be established: %w", refOf(crd), err)
		}
	}
	a.c.mapper.Reset()
	return nil
}
