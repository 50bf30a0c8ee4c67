package rollout

import (
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/client-go/tools/cache"
)

// The wait watches pods and ReplicaSets once per namespace, not once per workload: an
// application of a thousand Deployments is three watches, not two thousand. Each workload's pods
// are then found in the namespace's store by its selector, through an index of label pairs, so
// that a check of every workload at each event stays cheap. What the verdicts do not read (specs,
// managed fields) is dropped as objects arrive, so that the stores of a namespace of thousands of
// pods stay small.

// labelIndex indexes objects by each of their labels, "key=value".
const labelIndex = "label"

var labelIndexers = cache.Indexers{labelIndex: func(obj any) ([]string, error) {
	m, err := meta.Accessor(obj)
	if err != nil {
		return nil, nil // a tombstone: not indexed
	}
	out := make([]string, 0, len(m.GetLabels()))
	for k, v := range m.GetLabels() {
		out = append(out, k+"="+v)
	}
	return out, nil
}}

// selected are the objects of store whose labels sel matches: through the index of one of its
// equality requirements, else the whole store.
func selected[T metav1.Object](store cache.Indexer, sel labels.Selector) []T {
	if store == nil || sel == nil {
		return nil
	}
	var candidates []any
	if pair, ok := indexedPair(sel); ok {
		candidates, _ = store.ByIndex(labelIndex, pair)
	} else {
		candidates = store.List()
	}
	var out []T
	for _, c := range candidates {
		if o, ok := c.(T); ok && sel.Matches(labels.Set(o.GetLabels())) {
			out = append(out, o)
		}
	}
	return out
}

// indexedPair is the label pair, "key=value", that every object sel matches carries: its first
// requirement of one value by equality. selected reads the index by it, and the wait finds by it
// which workloads a pod's or ReplicaSet's change concerns.
func indexedPair(sel labels.Selector) (string, bool) {
	reqs, ok := sel.Requirements()
	if !ok {
		return "", false
	}
	for _, r := range reqs {
		op, values := r.Operator(), r.Values()
		if (op == selection.Equals || op == selection.DoubleEquals || op == selection.In) && values.Len() == 1 {
			return r.Key() + "=" + values.UnsortedList()[0], true
		}
	}
	return "", false
}

// slim drops from an object what no verdict reads before the informer stores it: managed fields
// of all, pods' specs, the pod templates of ReplicaSets and workloads.
func slim(obj any) (any, error) {
	if m, ok := obj.(metav1.Object); ok {
		m.SetManagedFields(nil)
	}
	switch o := obj.(type) {
	case *corev1.Pod:
		o.Spec = corev1.PodSpec{}
	case *appsv1.ReplicaSet:
		o.Spec.Template = corev1.PodTemplateSpec{}
	case *appsv1.Deployment:
		o.Spec.Template = corev1.PodTemplateSpec{}
	case *appsv1.StatefulSet:
		o.Spec.Template = corev1.PodTemplateSpec{}
		o.Spec.VolumeClaimTemplates = nil
	case *appsv1.DaemonSet:
		o.Spec.Template = corev1.PodTemplateSpec{}
	case *batchv1.Job:
		o.Spec.Template = corev1.PodTemplateSpec{}
	}
	return obj, nil
}
