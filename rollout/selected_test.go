package rollout

import (
	"slices"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"
)

// A workload finds its pods in its namespace's store by its selector, through the label index
// where the selector has an equality, by a scan where it has none.
func TestSelected(t *testing.T) {
	store := cache.NewIndexer(cache.MetaNamespaceKeyFunc, labelIndexers)
	for _, p := range []struct {
		name   string
		labels map[string]string
	}{
		{"a-1", map[string]string{"app": "a", "tier": "web"}},
		{"a-2", map[string]string{"app": "a", "tier": "worker"}},
		{"b-1", map[string]string{"app": "b", "tier": "web"}},
		{"none", nil},
	} {
		if err := store.Add(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: p.name, Namespace: "ns", Labels: p.labels}}); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		selector metav1.LabelSelector
		want     []string
	}{
		{metav1.LabelSelector{MatchLabels: map[string]string{"app": "a"}}, []string{"a-1", "a-2"}},
		{metav1.LabelSelector{MatchLabels: map[string]string{"app": "a", "tier": "web"}}, []string{"a-1"}},
		{metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "tier", Operator: metav1.LabelSelectorOpIn, Values: []string{"web"}}}}, []string{"a-1", "b-1"}},
		{metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "tier", Operator: metav1.LabelSelectorOpIn, Values: []string{"web", "worker"}}}}, []string{"a-1", "a-2", "b-1"}},
		{metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "app", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"a"}}}}, []string{"b-1", "none"}},
		{metav1.LabelSelector{MatchLabels: map[string]string{"app": "c"}}, nil},
	}
	for _, tt := range tests {
		sel, err := metav1.LabelSelectorAsSelector(&tt.selector)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, p := range selected[*corev1.Pod](store, sel) {
			got = append(got, p.Name)
		}
		slices.Sort(got)
		if !slices.Equal(got, tt.want) {
			t.Errorf("%s: %v, want %v", sel, got, tt.want)
		}
	}
}

// What no verdict reads is dropped before a store keeps it.
func TestSlim(t *testing.T) {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "m"}}},
		Spec:   corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "i"}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	out, _ := slim(p)
	got := out.(*corev1.Pod)
	if got.ManagedFields != nil || len(got.Spec.Containers) != 0 || got.Status.Phase != corev1.PodRunning || got.Name != "p" {
		t.Errorf("slim pod: %+v", got)
	}
	if out, _ := slim(cache.DeletedFinalStateUnknown{Key: "ns/p"}); out.(cache.DeletedFinalStateUnknown).Key != "ns/p" {
		t.Errorf("slim changed a tombstone: %v", out)
	}
}

// TestMarked: a change marks the targets it concerns and no other, so that the wait checks a
// thousand workloads' verdicts only where something moved.
func TestMarked(t *testing.T) {
	sel := func(s string) labels.Selector {
		out, err := labels.Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	a := &target{ref: Ref{Group: "apps", Kind: "Deployment", Namespace: "ns", Name: "a"}, selector: sel("app=a")}
	b := &target{ref: Ref{Group: "apps", Kind: "Deployment", Namespace: "ns", Name: "b"}, selector: sel("app=b,tier=web")}
	c := &target{ref: Ref{Group: "apps", Kind: "Deployment", Namespace: "ns", Name: "c"}, selector: sel("app in (c1, c2)")}
	other := &target{ref: Ref{Group: "apps", Kind: "Deployment", Namespace: "other", Name: "a"}, selector: sel("app=a")}
	w := &watches{dirty: map[*target]bool{}, byName: map[string][]*target{}, byPair: map[string][]*target{}, unindexed: map[string][]*target{}}
	for _, tg := range []*target{a, b, c, other} {
		w.byKey("apps/Deployment/"+tg.ref.Namespace, tg)
		w.bySelector(tg)
	}
	podOf := func(ns string, l map[string]string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "p", Labels: l}}
	}
	for _, tc := range []struct {
		name string
		key  string
		obj  any
		want []*target
	}{
		{"a's pod", "", podOf("ns", map[string]string{"app": "a", "pod-template-hash": "x"}), []*target{a}},
		{"b's pod", "", podOf("ns", map[string]string{"app": "b", "tier": "web"}), []*target{b}},
		{"a pod b's selector does not match", "", podOf("ns", map[string]string{"app": "b"}), nil},
		{"c's pod, through the unindexed", "", podOf("ns", map[string]string{"app": "c2"}), []*target{c}},
		{"a pod of another namespace", "", podOf("other", map[string]string{"app": "a"}), []*target{other}},
		{"a pod of no workload", "", podOf("ns", map[string]string{"app": "z"}), nil},
		{"a deleted pod, a tombstone", "", cache.DeletedFinalStateUnknown{Key: "ns/p", Obj: podOf("ns", map[string]string{"app": "a"})}, []*target{a}},
		{"the Deployment itself", "apps/Deployment/ns", &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "b"}}, []*target{b}},
		{"a Deployment of no target", "apps/Deployment/ns", &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "z"}}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w.marked(tc.key, tc.obj)
			dirty := w.takeDirty()
			if len(dirty) != len(tc.want) {
				t.Fatalf("marked %d targets, want %d", len(dirty), len(tc.want))
			}
			for _, tg := range tc.want {
				if !dirty[tg] {
					t.Errorf("%s/%s not marked", tg.ref.Namespace, tg.ref.Name)
				}
			}
		})
	}
}

// TestProgress: a round checks the targets marked and those whose recheck has come, in the
// targets' order, and the count of those not done follows each one's turns.
func TestProgress(t *testing.T) {
	store := cache.NewStore(cache.MetaNamespaceKeyFunc)
	object := func(name, ready string) *unstructured.Unstructured {
		u := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "example.com/v1", "kind": "Widget",
			"metadata": map[string]any{"namespace": "ns", "name": name},
			"status":   map[string]any{"conditions": []any{map[string]any{"type": "Ready", "status": ready}}},
		}}
		if err := store.Update(u); err != nil {
			t.Fatal(err)
		}
		return u
	}
	var targets []*target
	for i, name := range []string{"a", "b", "c"} {
		object(name, "Unknown")
		targets = append(targets, &target{ref: Ref{Group: "example.com", Version: "v1", Kind: "Widget", Namespace: "ns", Name: name}, objects: store, order: i})
	}
	a, b, c := targets[0], targets[1], targets[2]
	var told []string
	opts := WaitOptions{OnStatus: func(s Status) { told = append(told, s.Name) }}
	p := &progress{undone: len(targets), rechecking: map[*target]bool{}}
	now := time.Now()
	if err := p.check(targets, now, opts); err != nil {
		t.Fatal(err)
	}
	if p.undone != 3 || !slices.Equal(told, []string{"a", "b", "c"}) {
		t.Fatalf("first round: %d undone, told %v; want 3, a b c", p.undone, told)
	}

	w := &watches{dirty: map[*target]bool{c: true, a: true}}
	b.recheck, p.rechecking[b] = now.Add(time.Second), true
	if due := w.due(now, p); !slices.Equal(due, []*target{a, c}) {
		t.Errorf("due before b's recheck: %v, want a and c", names(due))
	}
	w.dirty = map[*target]bool{c: true}
	if due := w.due(now.Add(time.Second), p); !slices.Equal(due, []*target{b, c}) {
		t.Errorf("due at b's recheck: %v, want b and c", names(due))
	}
	if got := p.earliest(); !got.Equal(b.recheck) {
		t.Errorf("earliest recheck %v, want b's %v", got, b.recheck)
	}

	object("a", "True")
	object("c", "True")
	if err := p.check([]*target{a, c}, now, opts); err != nil || p.undone != 1 {
		t.Fatalf("a and c ready: %d undone (%v), want 1", p.undone, err)
	}
	if p.rechecking[b] == false || p.earliest().IsZero() {
		t.Error("b's recheck dropped by a round that did not check b")
	}
	object("c", "Unknown")
	if err := p.check([]*target{c}, now, opts); err != nil || p.undone != 2 {
		t.Fatalf("c no longer ready: %d undone (%v), want 2", p.undone, err)
	}
	object("b", "True")
	object("c", "True")
	if err := p.check([]*target{b, c}, now, opts); err != nil || p.undone != 0 {
		t.Fatalf("all ready: %d undone (%v), want 0", p.undone, err)
	}
	if len(p.rechecking) != 0 {
		t.Errorf("%d targets still to recheck after all are ready", len(p.rechecking))
	}
}

func names(targets []*target) []string {
	var out []string
	for _, t := range targets {
		out = append(out, t.ref.Name)
	}
	return out
}
