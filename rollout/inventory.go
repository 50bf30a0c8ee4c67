package rollout

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/pager"
)

// An apply reads what is on the cluster with a LIST per kind and namespace it applies to, before
// it applies there, not with a GET per object: the set's members there, whole (which a PATCH's
// answer is compared with, to say unchanged or configured, and which prune deletes when the
// apply no longer has them), and, only when some object about to be applied is not among them (a
// first apply, an object added, a Helm release's to adopt), every object's metadata there:
// which exist (the rest are created), which a Helm release made (adopted before they are applied),
// which are someone else's (a rollback refuses them). Metadata alone, so that a namespace's other
// Secrets (a Helm release's hold its whole manifest) are not read. What the apply does not need
// of a listed object is dropped as the pages come.

// listPageSize is the LIST page kubectl uses.
const listPageSize = 500

// place is a resource in a namespace ("" for a cluster-scoped resource).
type place struct {
	resource  schema.GroupVersionResource
	namespace string
}

// found is what the LISTs said of an object about to be applied.
type found struct {
	uid    types.UID
	rv     string
	member bool                       // it carries the set's part-of label
	sum    [sha256.Size]byte          // of its fields without bookkeeping (sumOf): whether an apply changed it; of its metadata alone when it is not a member
	helm   *HelmRelease               // the Helm release that made it
	obj    *unstructured.Unstructured // whole, only where it is needed: a dry run's diff, a Helm object's adoption
}

// listing is one LIST of a resource in a namespace.
type listing struct {
	mapping *meta.RESTMapping
	objects map[string]*found // the objects about to be applied that exist, by name
	members []member          // every member of the set there, applied now or not
}

// inventory is the listings of a run, made once each.
type inventory struct {
	mu       sync.Mutex
	listings map[place]*listing
}

func (inv *inventory) get(p place) (*listing, bool) {
	inv.mu.Lock()
	defer inv.mu.Unlock()
	l, ok := inv.listings[p]
	return l, ok
}

func (inv *inventory) put(p place, l *listing) {
	inv.mu.Lock()
	defer inv.mu.Unlock()
	if inv.listings == nil {
		inv.listings = map[place]*listing{}
	}
	inv.listings[p] = l
}

// list reads the resource of m in namespace: the set's members, and what exists of the objects
// named in names. whole keeps the objects whole (a dry run, for the diff: an object that is not
// a member is then read with a GET of its own).
func list(ctx context.Context, c *client, set Set, m *meta.RESTMapping, namespace string, names map[string]bool, whole bool) (*listing, error) {
	l := &listing{mapping: m, objects: map[string]*found{}}
	where := ""
	if namespace != "" {
		where = " in namespace " + namespace
	}
	ri := c.resource(m, namespace)
	err := eachPage(ctx, func(o metav1.ListOptions) (runtime.Object, error) {
		o.LabelSelector = LabelPartOf + "=" + set.ID
		return ri.List(ctx, o)
	}, func(item runtime.Object) error {
		obj, ok := item.(*unstructured.Unstructured)
		if !ok || obj.GetLabels()[LabelPartOf] != set.ID {
			return nil
		}
		mem := member{ref: refOf(obj), mapping: m, uid: obj.GetUID()}
		if whole {
			obj.SetManagedFields(nil) // kept for a diff, which leaves them out
			mem.obj = obj
		}
		l.members = append(l.members, mem)
		if names[obj.GetName()] {
			f := &found{uid: obj.GetUID(), rv: obj.GetResourceVersion(), member: true, sum: sumOf(obj)}
			if whole {
				f.obj = obj
			}
			l.objects[obj.GetName()] = f
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list the set's %s%s: %w", m.Resource.Resource, where, err)
	}
	if len(l.objects) == len(names) {
		return l, nil
	}
	mi := c.md.Resource(m.Resource).Namespace(namespace)
	err = eachPage(ctx, func(o metav1.ListOptions) (runtime.Object, error) { return mi.List(ctx, o) }, func(item runtime.Object) error {
		pm, ok := item.(*metav1.PartialObjectMetadata)
		if !ok || !names[pm.Name] || l.objects[pm.Name] != nil {
			return nil
		}
		obj, err := unstructuredOf(pm, m)
		if err != nil {
			return err
		}
		f := &found{uid: pm.UID, rv: pm.ResourceVersion, member: pm.Labels[LabelPartOf] == set.ID, sum: sumOf(obj)}
		if r, ok := helmRelease(obj); ok {
			f.helm, f.obj = r, obj
		}
		l.objects[pm.Name] = f
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list the %s%s: %w", m.Resource.Resource, where, err)
	}
	if whole {
		// what a dry run's diff shows of an object that is not the set's: read whole, one by one
		for name, f := range l.objects {
			if f.obj != nil && f.helm == nil {
				continue
			}
			obj, err := ri.Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return nil, fmt.Errorf("read %s/%s%s: %w", m.Resource.Resource, name, where, err)
			}
			obj.SetManagedFields(nil)
			f.obj = obj
		}
	}
	return l, nil
}

// eachPage lists in pages of listPageSize, handing each item to f.
func eachPage(ctx context.Context, page func(metav1.ListOptions) (runtime.Object, error), f func(runtime.Object) error) error {
	p := pager.New(pager.SimplePageFunc(page))
	p.PageSize = listPageSize
	p.PageBufferSize = 0
	return p.EachListItem(ctx, metav1.ListOptions{}, f)
}

// unstructuredOf is an object's metadata as an object of m's kind, as adopt reads it.
func unstructuredOf(pm *metav1.PartialObjectMetadata, m *meta.RESTMapping) (*unstructured.Unstructured, error) {
	md, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&pm.ObjectMeta)
	if err != nil {
		return nil, err
	}
	obj := &unstructured.Unstructured{Object: map[string]any{"metadata": md}}
	obj.SetGroupVersionKind(m.GroupVersionKind)
	return obj, nil
}

// sumOf is a digest of obj's fields without bookkeeping (WithoutBookkeeping), to tell whether
// an apply changed an object whose resourceVersion moved (a controller may have written its
// status in between).
func sumOf(obj *unstructured.Unstructured) [sha256.Size]byte {
	c := make(map[string]any, len(obj.Object))
	for k, v := range obj.Object {
		if k != "status" {
			c[k] = v
		}
	}
	if md, ok := obj.Object["metadata"].(map[string]any); ok {
		m := make(map[string]any, len(md))
		for k, v := range md {
			switch k {
			case "managedFields", "resourceVersion", "generation":
			default:
				m[k] = v
			}
		}
		c["metadata"] = m
	}
	data, err := json.Marshal(c) // map keys sorted: the same fields give the same bytes
	if err != nil {
		return [sha256.Size]byte{}
	}
	return sha256.Sum256(data)
}
