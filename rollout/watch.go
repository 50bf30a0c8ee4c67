package rollout

import (
	"context"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
)

// listWatch lists and watches a resource of the dynamic client dyn, narrowed by a field and a
// label selector. A resource the server no longer serves (the CRD of the kind is gone) lists as
// empty. dyn says whether it can stream a list as a watch (client-go's fakes cannot).
func listWatch(dyn dynamic.Interface, ri dynamic.ResourceInterface, fieldSelector, labelSelector string) cache.ListerWatcher {
	narrow := func(o metav1.ListOptions) metav1.ListOptions {
		o.FieldSelector, o.LabelSelector = fieldSelector, labelSelector
		return o
	}
	return cache.ToListWatcherWithWatchListSemantics(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			list, err := ri.List(ctx, narrow(o))
			if apierrors.IsNotFound(err) || apierrors.IsMethodNotSupported(err) {
				return &unstructured.UnstructuredList{}, nil
			}
			return list, err
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return ri.Watch(ctx, narrow(o))
		},
	}, dyn)
}

// until watches one object until cond holds of it.
func until(ctx context.Context, dyn dynamic.Interface, ri dynamic.ResourceInterface, name string, cond func(*unstructured.Unstructured) bool) error {
	lw := listWatch(dyn, ri, fields.OneTermEqualSelector("metadata.name", name).String(), "")
	_, err := watchtools.UntilWithSync(ctx, lw, &unstructured.Unstructured{}, nil, func(ev watch.Event) (bool, error) {
		obj, ok := ev.Object.(*unstructured.Unstructured)
		return ok && ev.Type != watch.Deleted && obj.GetName() == name && cond(obj), nil
	})
	return ended(ctx, err)
}

// untilGone watches the objects of a resource that carry a label until none of names is left:
// client-go's list, then watch, restarted from a new list when the watch ends.
func untilGone(ctx context.Context, dyn dynamic.Interface, ri dynamic.ResourceInterface, labelSelector string, names []string) error {
	left := sets.New(names...)
	listed := func(store cache.Store) (bool, error) {
		present := sets.New[string]()
		for _, obj := range store.List() {
			if u, ok := obj.(*unstructured.Unstructured); ok {
				present.Insert(u.GetName())
			}
		}
		left = left.Intersection(present)
		return left.Len() == 0, nil
	}
	_, err := watchtools.UntilWithSync(ctx, listWatch(dyn, ri, "", labelSelector), &unstructured.Unstructured{}, listed,
		func(ev watch.Event) (bool, error) {
			if u, ok := ev.Object.(*unstructured.Unstructured); ok && ev.Type == watch.Deleted {
				left.Delete(u.GetName())
			}
			return left.Len() == 0, nil
		})
	return ended(ctx, err)
}

// ended is the error of a watch: the context's when it ended the watch (client-go says "timed
// out waiting for the condition" whether a deadline passed or not), so that a deadline is a
// context.DeadlineExceeded.
func ended(ctx context.Context, err error) error {
	if err != nil && ctx.Err() != nil {
		return context.Cause(ctx)
	}
	return err
}
