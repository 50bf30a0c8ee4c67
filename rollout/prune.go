package rollout

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	kube "github.com/toa-deploy/toa-deploy/internal/cluster"
)

// Workloads are deleted in the foreground: the API server keeps a pruned or deleted Deployment
// until the garbage collector has deleted its ReplicaSets and they their pods, and the pods go only
// when their grace period has run out. So the object's disappearance means its pods are gone too,
// which is what Wait and Delete wait for: the same promise as a rollout's, that nothing of the old
// application still runs when toa-apply returns. With Background the Deployment would vanish at
// once and its pods terminate unseen. Every other kind is deleted in the background: it has no
// dependents to wait for, and a foreground deletion would wait for the garbage collector to
// notice the object's kind (for a custom resource, up to its resync period) before it goes.
var (
	foreground = metav1.DeletePropagationForeground
	background = metav1.DeletePropagationBackground
)

// foregroundKinds own pods, through ReplicaSets or directly.
var foregroundKinds = []schema.GroupKind{
	{Group: "apps", Kind: "Deployment"}, {Group: "apps", Kind: "ReplicaSet"}, {Group: "apps", Kind: "StatefulSet"},
	{Group: "apps", Kind: "DaemonSet"}, {Group: "batch", Kind: "Job"}, {Group: "batch", Kind: "CronJob"},
}

func propagation(gk schema.GroupKind) *metav1.DeletionPropagation {
	if slices.Contains(foregroundKinds, gk) {
		return &foreground
	}
	return &background
}

// member is an object of the set found on the cluster.
type member struct {
	ref     Ref
	mapping *meta.RESTMapping
	uid     types.UID
	obj     *unstructured.Unstructured // whole, for a dry run's diff; nil otherwise
}

// listMembers lists the objects of the kinds, in the namespaces, that carry the set's part-of
// label: nothing else is ever pruned or deleted. Kinds the cluster no longer serves are skipped.
// listed, when it holds a place, gives its members instead of a LIST (an apply listed it
// already). whole keeps the objects whole (a dry run's diff shows them).
func listMembers(ctx context.Context, c *client, set Set, kinds []schema.GroupKind, namespaces []string, logf func(string, ...any),
	listed func(place) (*listing, bool), whole bool) ([]member, error) {
	var out []member
	seen := map[string]bool{}
	add := func(m member) {
		if !seen[m.ref.key()] {
			seen[m.ref.key()] = true
			out = append(out, m)
		}
	}
	for _, gk := range uniqKinds(kinds) {
		m, err := c.mapper.RESTMapping(gk)
		if meta.IsNoMatchError(err) {
			logf("the cluster no longer serves %s: none of the set's objects of that kind are left to prune", gk)
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("find the resource of %s: %w", gk, err)
		}
		where := slices.DeleteFunc(uniq(namespaces), func(ns string) bool { return ns == "" })
		if m.Scope.Name() == meta.RESTScopeNameRoot {
			where = []string{""}
		}
		for _, ns := range where {
			if l, ok := listed(place{m.Resource, ns}); ok && l != nil {
				for _, mem := range l.members {
					add(mem)
				}
				continue
			}
			list, err := c.resource(m, ns).List(ctx, metav1.ListOptions{LabelSelector: LabelPartOf + "=" + set.ID})
			if err != nil {
				return nil, fmt.Errorf("list the set's %s in %q: %w", m.Resource.Resource, ns, err)
			}
			for i := range list.Items {
				obj := &list.Items[i]
				if obj.GetLabels()[LabelPartOf] != set.ID {
					continue
				}
				mem := member{ref: refOf(obj), mapping: m, uid: obj.GetUID()}
				if whole {
					mem.obj = obj
				}
				add(mem)
			}
		}
	}
	// the reverse of the apply order: Ingress before workloads before Services...
	slices.SortStableFunc(out, func(a, b member) int { return cmp.Compare(stage(b.ref.Kind), stage(a.ref.Kind)) })
	return out, nil
}

// deleteMember deletes a member in the foreground, only if it is still the object listed.
func deleteMember(ctx context.Context, c *client, m member) error {
	uid := m.uid
	err := c.resource(m.mapping, m.ref.Namespace).Delete(ctx, m.ref.Name, metav1.DeleteOptions{
		PropagationPolicy: propagation(m.ref.GroupKind()),
		Preconditions:     &metav1.Preconditions{UID: &uid},
	})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("delete %s: %w", m.ref, err)
	}
	return nil
}

// prune deletes the set's objects that this apply did not apply.
func (a *applier) prune(ctx context.Context, kinds []schema.GroupKind, namespaces []string) error {
	applied := map[string]bool{}
	for _, obj := range a.res.Applied {
		applied[obj.key()] = true
	}
	all, err := listMembers(ctx, a.c, a.set, kinds, namespaces, a.opts.logf, a.inv.get, a.opts.DryRun)
	if err != nil {
		return err
	}
	for _, m := range all {
		if applied[m.ref.key()] {
			continue
		}
		if !a.opts.DryRun {
			if err := deleteMember(ctx, a.c, m); err != nil {
				return fmt.Errorf("prune: %w", err)
			}
		}
		a.opts.logf("%s pruned", m.ref)
		a.res.Pruned = append(a.res.Pruned, m.ref)
		if a.opts.DryRun {
			a.res.PrunedObjects = append(a.res.PrunedObjects, m.obj)
		}
	}
	return nil
}

// Delete removes the whole application the objects belong to from the namespace: every member of
// its ApplySet, of the kinds the parent records and the objects have, and then the parent (the
// revisions it owns are the revision package's to delete). It returns once they are gone, their
// pods included. Objects without the set's label are left
// alone, even if the objects name them.
func Delete(ctx context.Context, k *kube.Client, objects []*unstructured.Unstructured, opts Options) (*Result, error) {
	return deleteWith(ctx, clientOf(k), objects, opts)
}

func deleteWith(ctx context.Context, c *client, objects []*unstructured.Unstructured, opts Options) (*Result, error) {
	set, err := setOf(objects, opts.Namespace)
	if err != nil {
		return nil, err
	}
	res := &Result{Set: set, DryRun: opts.DryRun}
	p, err := readParent(ctx, c, set)
	if err != nil {
		return res, err
	}
	kinds, namespaces := p.kinds, p.namespaces
	for _, obj := range objects {
		kinds = append(kinds, obj.GroupVersionKind().GroupKind())
		if obj.GetNamespace() != "" {
			namespaces = append(namespaces, obj.GetNamespace())
		}
	}
	none := func(place) (*listing, bool) { return nil, false }
	all, err := listMembers(ctx, c, set, kinds, namespaces, opts.logf, none, false)
	if err != nil {
		return res, err
	}
	for _, m := range all {
		if !opts.DryRun {
			if err := deleteMember(ctx, c, m); err != nil {
				return res, err
			}
		}
		opts.logf("%s deleted", m.ref)
		res.Deleted = append(res.Deleted, m.ref)
	}
	if opts.DryRun {
		return res, nil
	}
	if err := waitGone(ctx, c, set, all, opts.logf); err != nil {
		return res, err
	}
	if p.exists {
		err := c.dyn.Resource(secrets).Namespace(set.Namespace).Delete(ctx, set.Name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return res, fmt.Errorf("delete the ApplySet parent secret/%s: %w", set.Name, err)
		}
	}
	return res, nil
}

// waitGone watches the deleted members until none is left: with foreground deletion, until
// their pods are gone too.
func waitGone(ctx context.Context, c *client, set Set, members []member, logf func(string, ...any)) error {
	type where struct {
		resource  schema.GroupVersionResource
		namespace string
	}
	groups := map[where][]string{}
	mappings := map[where]*meta.RESTMapping{}
	for _, m := range members {
		w := where{m.mapping.Resource, m.ref.Namespace}
		groups[w] = append(groups[w], m.ref.Name)
		mappings[w] = m.mapping
	}
	for w, names := range groups {
		logf("waiting for %d %s to go", len(names), w.resource.Resource)
		if err := untilGone(ctx, c.dyn, c.resource(mappings[w], w.namespace), LabelPartOf+"="+set.ID, names); err != nil {
			return fmt.Errorf("wait for the deleted %s to go: %w", w.resource.Resource, err)
		}
	}
	return nil
}

func uniq[T cmp.Ordered](list []T) []T {
	out := slices.Clone(list)
	slices.Sort(out)
	return slices.Compact(out)
}

func uniqKinds(kinds []schema.GroupKind) []schema.GroupKind {
	out := slices.Clone(kinds)
	slices.SortFunc(out, func(a, b schema.GroupKind) int { return cmp.Compare(a.String(), b.String()) })
	return slices.Compact(out)
}
