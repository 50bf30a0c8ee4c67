package rollout

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/toa-deploy/toa-deploy/internal/fault"
	"github.com/toa-deploy/toa-deploy/rollout/status"
)

// fakeRollout is a Deployment of the set at the state d leaves it, with its ReplicaSets and pods,
// on client-go's fake clientset, and the Result an apply of it returned.
func fakeRollout(t *testing.T, d *appsv1.Deployment, objects ...runtime.Object) (*client, *Result) {
	t.Helper()
	set := NewSet("shop", "ns")
	d.Labels = map[string]string{LabelPartOf: set.ID}
	d.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "a"}}
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(d)
	if err != nil {
		t.Fatal(err)
	}
	res := &Result{Set: set, Applied: []Applied{{Ref: Ref{Group: "apps", Version: "v1", Kind: "Deployment",
		Namespace: d.Namespace, Name: d.Name}, Change: Configured, Object: &unstructured.Unstructured{Object: m}}}}
	return &client{cs: fake.NewClientset(append([]runtime.Object{d}, objects...)...)}, res
}

// labelled gives pods and ReplicaSets the Deployment's selector.
func labelled[T metav1.Object](o T) T {
	labels := o.GetLabels()
	if labels == nil {
		labels = map[string]string{}
	}
	labels["app"] = "a"
	o.SetLabels(labels)
	return o
}

func TestWaitDone(t *testing.T) {
	ready := func(p *corev1.Pod) {
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	}
	c, res := fakeRollout(t, deployment(nil), labelled(replicaSet("a-new", "new", "2", "d-uid")), labelled(pod("a-new-1", "new", ready)))
	var seen []Status
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := waitFor(ctx, c, res, WaitOptions{OnStatus: func(s Status) { seen = append(seen, s) }}); err != nil {
		t.Fatalf("waitFor = %v", err)
	}
	if len(seen) != 1 || !seen[0].Done || seen[0].Message != "rolled out" {
		t.Errorf("statuses %+v, want one: rolled out", seen)
	}
}

// A crash-looping pod of the new ReplicaSet fails the wait, explained by the pod's containers and
// Events.
func TestWaitFailureExplained(t *testing.T) {
	crash := func(p *corev1.Pod) {
		waiting("CrashLoopBackOff", "back-off 10s restarting failed container")(p)
		p.Status.Phase = corev1.PodRunning
		p.Status.ContainerStatuses[1].RestartCount = 3
		p.Status.ContainerStatuses[1].LastTerminationState.Terminated = &corev1.ContainerStateTerminated{
			ExitCode: 1, Reason: "Error", Message: "Cannot find module '/composition/index.js'\n"}
	}
	now := time.Now()
	event := func(name, reason, message string, count int32, ago time.Duration, uid string) *corev1.Event {
		return &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"},
			InvolvedObject: corev1.ObjectReference{Kind: "Pod", Name: "a-new-1", Namespace: "ns", UID: "a-new-1-uid"},
			Type:           "Warning", Reason: reason, Message: message, Count: count,
			LastTimestamp: metav1.NewTime(now.Add(-ago))}
	}
	p := labelled(pod("a-new-1", "new", crash))
	p.UID = "a-new-1-uid"
	other := event("e3", "BackOff", "of an earlier pod of the same name", 1, time.Second, "")
	other.InvolvedObject.UID = "old-uid"
	c, res := fakeRollout(t, deployment(func(d *appsv1.Deployment) { d.Status.AvailableReplicas = 1 }),
		labelled(replicaSet("a-new", "new", "2", "d-uid")), p,
		event("e1", "Pulled", "Successfully pulled image", 4, time.Minute, ""),
		event("e2", "BackOff", "Back-off restarting failed container app", 7, 5*time.Second, ""), other)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := waitFor(ctx, c, res, WaitOptions{})
	var f *status.Failure
	if !errors.As(err, &f) {
		t.Fatalf("waitFor = %v, want a *status.Failure", err)
	}
	if len(f.Pods) != 1 || f.Pods[0].Name != "a-new-1" {
		t.Fatalf("the failure explains %+v, want pod a-new-1", f.Pods)
	}
	r := f.Pods[0]
	if len(r.Containers) != 2 || r.Containers[1].Restarts != 3 || r.Containers[1].LastState == nil || r.Containers[1].LastState.ExitCode != 1 {
		t.Errorf("containers %+v, want the last exit code 1 and 3 restarts", r.Containers)
	}
	if len(r.Events) != 2 || r.Events[0].Reason != "Pulled" || r.Events[1].Reason != "BackOff" || r.Events[1].Count != 7 {
		t.Errorf("events %+v, want Pulled then BackOff x7 (not the other pod's)", r.Events)
	}
	var b strings.Builder
	status.WritePods(&b, f.Pods, now)
	for _, part := range []string{"pod a-new-1 (Running)", "container app: waiting (CrashLoopBackOff), ready false, 3 restarts",
		"last state: terminated, exit code 1 (Error): Cannot find module '/composition/index.js'",
		"5s ago  Warning  BackOff  x7  Back-off restarting failed container app"} {
		if !strings.Contains(b.String(), part) {
			t.Errorf("the text does not say %q:\n%s", part, b.String())
		}
	}
}

// A wait whose time runs out says what it awaited, with the Deployment's unready pods.
func TestWaitTimeoutExplained(t *testing.T) {
	c, res := fakeRollout(t, deployment(func(d *appsv1.Deployment) { d.Status.AvailableReplicas = 2 }),
		labelled(replicaSet("a-new", "new", "2", "d-uid")), labelled(pod("a-new-1", "new", nil)))
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	err := waitFor(ctx, c, res, WaitOptions{})
	var a *Awaiting
	if fault.ClassOf(err) != fault.ClassTimeout || !errors.As(err, &a) {
		t.Fatalf("waitFor = %v, want a timeout of an *Awaiting", err)
	}
	if len(a.Objects) != 1 || !strings.Contains(err.Error(), "deployment composition-a: 2 of 3 updated replicas available") {
		t.Errorf("the timeout says %q", err)
	}
	if len(a.Objects[0].Pods) != 1 || a.Objects[0].Pods[0].Name != "a-new-1" {
		t.Errorf("the timeout explains %+v, want the unready pod a-new-1", a.Objects[0].Pods)
	}
}

// applied is what an apply of obj returned, labelled as a member of set.
func applied(t *testing.T, set Set, obj runtime.Object) Applied {
	t.Helper()
	o := obj.(metav1.Object)
	labels := o.GetLabels()
	if labels == nil {
		labels = map[string]string{}
	}
	labels[LabelPartOf] = set.ID
	o.SetLabels(labels)
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{Object: m}
	gvk := obj.GetObjectKind().GroupVersionKind()
	u.SetGroupVersionKind(gvk)
	return Applied{Ref: refOf(u), Change: Configured, Object: u}
}

// everyKind is a StatefulSet rolled out, a Job complete and a Widget ready, on client-go's fakes,
// and the Result of an apply of them, with job's changes.
func everyKind(t *testing.T, change func(j *batchv1.Job), objects ...runtime.Object) (*client, *Result) {
	t.Helper()
	set := NewSet("shop", "ns")
	s := statefulSet(nil)
	s.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}}
	s.SetGroupVersionKind(appsv1.SchemeGroupVersion.WithKind("StatefulSet"))
	j := job(func(j *batchv1.Job) {
		jobConditions(batchv1.JobCondition{Type: batchv1.JobComplete, Status: corev1.ConditionTrue})(j)
		j.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"batch.kubernetes.io/controller-uid": "j-uid"}}
	})
	if change != nil {
		change(j)
	}
	j.SetGroupVersionKind(batchv1.SchemeGroupVersion.WithKind("Job"))
	w := widget(conditions(2, cond("Ready", "True", "Succeeded", "")))
	res := &Result{Set: set, Applied: []Applied{applied(t, set, s), applied(t, set, j)}}
	w.SetLabels(map[string]string{LabelPartOf: set.ID})
	res.Applied = append(res.Applied, Applied{Ref: refOf(w), Change: Configured, Object: w})

	widgets := schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}
	m := meta.NewDefaultRESTMapper([]schema.GroupVersion{widgets.GroupVersion()})
	m.Add(widgets.GroupVersion().WithKind("Widget"), meta.RESTScopeNamespace)
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{widgets: "WidgetList"}, w)
	return &client{cs: fake.NewClientset(append([]runtime.Object{s, j}, objects...)...), dyn: dyn, mapper: fakeMapper{m}}, res
}

// A StatefulSet, a Job and a custom resource are awaited with the Deployments, each named by
// its kind.
func TestWaitEveryKind(t *testing.T) {
	c, res := everyKind(t, nil)
	var seen []string
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := waitFor(ctx, c, res, WaitOptions{OnStatus: func(s Status) { seen = append(seen, s.Object()+": "+s.Message) }}); err != nil {
		t.Fatalf("waitFor = %v", err)
	}
	want := []string{"statefulset/db: rolled out: 3 pods at revision db-2", "job/migrate: complete: 0 succeeded",
		"widget.example.com/w: ready: Succeeded"}
	if strings.Join(seen, "\n") != strings.Join(want, "\n") {
		t.Errorf("statuses:\n%s\nwant:\n%s", strings.Join(seen, "\n"), strings.Join(want, "\n"))
	}
}

// A crash-looping pod of a Job fails the wait at once, the failure named by the Job and
// explained by the pod.
func TestWaitJobFailure(t *testing.T) {
	p := owned("migrate-1", "j-uid", map[string]string{"batch.kubernetes.io/controller-uid": "j-uid"},
		waiting("CrashLoopBackOff", "back-off 10s restarting failed container"))
	c, res := everyKind(t, func(j *batchv1.Job) { j.Status.Conditions = nil }, p)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := waitFor(ctx, c, res, WaitOptions{})
	var f *status.Failure
	if !errors.As(err, &f) {
		t.Fatalf("waitFor = %v, want a *status.Failure", err)
	}
	if f.Kind != "Job" || f.Name != "migrate" || f.Container != "app" || f.Reason != "CrashLoopBackOff" || f.Deployment != "" {
		t.Errorf("the failure is %+v, want Job migrate's container app in CrashLoopBackOff", f)
	}
	if !strings.HasPrefix(err.Error(), "job migrate: pod migrate-1, container app: CrashLoopBackOff") {
		t.Errorf("the failure says %q", err)
	}
	if len(f.Pods) != 1 || f.Pods[0].Name != "migrate-1" {
		t.Errorf("the failure explains %+v, want pod migrate-1", f.Pods)
	}
}

// A wait whose time runs out names each object it awaited by kind.
func TestWaitTimeoutNamesKinds(t *testing.T) {
	c, res := everyKind(t, func(j *batchv1.Job) { j.Status.Conditions = nil })
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	err := waitFor(ctx, c, res, WaitOptions{})
	var a *Awaiting
	if !errors.As(err, &a) || len(a.Objects) != 1 || a.Objects[0].Kind != "Job" {
		t.Fatalf("waitFor = %v, want a timeout awaiting the Job", err)
	}
	if !strings.Contains(err.Error(), "timed out waiting for job migrate: 0 of 1 completions") {
		t.Errorf("the timeout says %q", err)
	}
}

// fakeMapper is a REST mapper of the kinds a hermetic wait test uses.
type fakeMapper struct{ *meta.DefaultRESTMapper }

func (fakeMapper) Reset() {}
