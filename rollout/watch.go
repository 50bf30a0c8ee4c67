package rollout

import (
	"context"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
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
// A resource the server no longer serves (the CRD of the kind is gone) has nothing left. A watch
// that ends is started again from a new list.
func untilGone(ctx context.Context, ri dynamic.ResourceInterface, labelSelector string, names []string) error {
	for {
		list, err := ri.List(ctx, metav1.ListOptions{LabelSelector: labelSelector})
		if apierrors.IsNotFound(err) || apierrors.IsMethodNotSupported(err) {
			return nil
		}
		if err != nil {
			return err
		}
		left := map[string]bool{}
		for _, obj := range list.Items {
			if slices.Contains(names, obj.GetName()) {
				left[obj.GetName()] = true
			}
		}
		if len(left) == 0 {
			return nil
		}
		w, err := ri.Watch(ctx, metav1.ListOptions{LabelSelector: labelSelector, ResourceVersion: list.GetResourceVersion()})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil && !apierrors.IsGone(err) && !apierrors.IsResourceExpired(err) {
			return err
		}
		if err == nil {
			gone := func() bool {
				defer w.Stop()
				for {
					select {
					case <-ctx.Done():
						return false
					case ev, ok := <-w.ResultChan():
						if !ok || ev.Type == watch.Error {
							return false // list again
						}
						if u, ok := ev.Object.(*unstructured.Unstructured); ok && ev.Type == watch.Deleted {
							delete(left, u.GetName())
						}
						if len(left) == 0 {
							return true
						}
					}
				}
			}()
			if gone {
				return nil
			}
		}
		if err := ctx.Err(); err != nil {
			return err
		}
	}
}
