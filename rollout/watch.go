package rollout

import (
	"context"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
)

// listWatch lists and watches a resource, narrowed by a field and a label selector.
func listWatch(ri dynamic.ResourceInterface, fieldSelector, labelSelector string) cache.ListerWatcher {
	narrow := func(o metav1.ListOptions) metav1.ListOptions {
		o.FieldSelector, o.LabelSelector = fieldSelector, labelSelector
		return o
	}
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return ri.List(ctx, narrow(o))
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return ri.Watch(ctx, narrow(o))
		},
	}
}

// until watches one object until cond holds of it.
func until(ctx context.Context, ri dynamic.ResourceInterface, name string, cond func(*unstructured.Unstructured) bool) error {
	lw := listWatch(ri, fields.OneTermEqualSelector("metadata.name", name).String(), "")
	_, err := watchtools.UntilWithSync(ctx, lw, &unstructured.Unstructured{}, nil, func(ev watch.Event) (bool, error) {
		obj, ok := ev.Object.(*unstructured.Unstructured)
		return ok && ev.Type != watch.Deleted && cond(obj), nil
	})
	return err
}

// untilGone watches the objects of a resource that carry a label until none of names is left.
func untilGone(ctx context.Context, ri dynamic.ResourceInterface, labelSelector string, names []string) error {
	left := map[string]bool{}
	_, err := watchtools.UntilWithSync(ctx, listWatch(ri, "", labelSelector), &unstructured.Unstructured{},
		func(store cache.Store) (bool, error) {
			for _, obj := range store.List() {
				if u, ok := obj.(*unstructured.Unstructured); ok {
					left[u.GetName()] = true
				}
			}
			for name := range left {
				if !slices.Contains(names, name) {
					delete(left, name)
				}
			}
			return len(left) == 0, nil
		},
		func(ev watch.Event) (bool, error) {
			if u, ok := ev.Object.(*unstructured.Unstructured); ok && ev.Type == watch.Deleted {
				delete(left, u.GetName())
			}
			return len(left) == 0, nil
		})
	return err
}
