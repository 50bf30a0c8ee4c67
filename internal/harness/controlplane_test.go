package harness

import (
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"
)

// TestControlPlane proves that the local control plane behaves like a
// cluster in the ways the project depends on: Deployments roll out onto the
// simulated node, replaced pods terminate over their grace period after the
// Deployment already reports the rollout done, and the project's kwok stages
// make labelled pods crash-loop or fail to pull their image.
func TestControlPlane(t *testing.T) {
	kubeconfig := Kubeconfig(t)
	t.Run("rollout leaves old pods terminating", func(t *testing.T) {
		t.Parallel()
		testRollout(t, kubeconfig)
	})
	t.Run("crashloop", func(t *testing.T) {
		t.Parallel()
		testFailingPod(t, kubeconfig, "crashloop")
	})
	t.Run("imagepull", func(t *testing.T) {
		t.Parallel()
		testFailingPod(t, kubeconfig, "imagepull")
	})
}

// observer feeds every change of Pods and Deployments in a namespace, in
// the order it arrives, into one channel.
type observer struct {
	events  chan observation
	stopped chan struct{}
}

type observation struct {
	at      time.Time
	obj     any // *corev1.Pod or *appsv1.Deployment
	deleted bool
}

func observe(t *testing.T, cs kubernetes.Interface, ns string) *observer {
	o := &observer{events: make(chan observation, 1024), stopped: make(chan struct{})}
	factory := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(ns))
	send := func(obj any, deleted bool) {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		select {
		case o.events <- observation{at: time.Now(), obj: obj, deleted: deleted}:
		case <-o.stopped:
		}
	}
	handler := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { send(obj, false) },
		UpdateFunc: func(_, obj any) { send(obj, false) },
		DeleteFunc: func(obj any) { send(obj, true) },
	}
	for _, inf := range []cache.SharedIndexInformer{
		factory.Core().V1().Pods().Informer(),
		factory.Apps().V1().Deployments().Informer(),
	} {
		if _, err := inf.AddEventHandler(handler); err != nil {
			t.Fatal(err)
		}
	}
	factory.Start(o.stopped)
	t.Cleanup(func() {
		close(o.stopped)
		factory.Shutdown()
	})
	return o
}

// until feeds observations to f until it returns true, failing the test if
// that takes longer than the timeout.
func (o *observer) until(t *testing.T, timeout time.Duration, what string, f func(observation) bool) {
	t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case ev := <-o.events:
			if f(ev) {
				return
			}
		case <-deadline:
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
	}
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// rolledOut says whether a Deployment is done by kubectl rollout status's
// rules: every replica updated and available, none of the old ones counted.
func rolledOut(d *appsv1.Deployment) bool {
	s := d.Status
	return d.Generation <= s.ObservedGeneration &&
		s.UpdatedReplicas == *d.Spec.Replicas &&
		s.Replicas == s.UpdatedReplicas &&
		s.AvailableReplicas == s.UpdatedReplicas
}

func testRollout(t *testing.T, kubeconfig string) {
	const grace = 3 * time.Second
	ns := Namespace(t, kubeconfig)
	cs := clientset(t, kubeconfig)
	ctx := t.Context()
	o := observe(t, cs, ns)

	labels := map[string]string{"app": "web"}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ref[int32](2),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			// As toa's Deployments: every new pod at once, no old one
			// stopped before the new ones are available.
			Strategy: appsv1.DeploymentStrategy{
				Type: appsv1.RollingUpdateDeploymentStrategyType,
				RollingUpdate: &appsv1.RollingUpdateDeployment{
					MaxSurge:       ref(intstr.FromString("100%")),
					MaxUnavailable: ref(intstr.FromInt32(0)),
				},
			},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{
					Labels: labels,
					// kwok's pod-delete stage removes a deleted pod after a
					// random part of its grace period, or, with a delay this
					// long, exactly when the grace period ends.
					Annotations: map[string]string{"pod-delete.stage.kwok.x-k8s.io/delay": "1h"},
				},
				Spec: corev1.PodSpec{
					TerminationGracePeriodSeconds: ref(int64(grace / time.Second)),
					Containers:                    []corev1.Container{{Name: "web", Image: "registry.invalid/web:1"}},
				},
			},
		},
	}
	_, err := cs.AppsV1().Deployments(ns).Create(ctx, dep, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	// Both pods Ready and the Deployment rolled out.
	ready := map[string]bool{}
	var done bool
	o.until(t, 60*time.Second, "the first rollout", func(ev observation) bool {
		switch x := ev.obj.(type) {
		case *corev1.Pod:
			ready[x.Name] = !ev.deleted && x.DeletionTimestamp == nil && podReady(x)
		case *appsv1.Deployment:
			done = rolledOut(x)
		}
		n := 0
		for _, r := range ready {
			if r {
				n++
			}
		}
		return n == 2 && done
	})
	old := map[string]bool{}
	for name, r := range ready {
		if r {
			old[name] = true
		}
	}
	t.Logf("first rollout done: pods %v", keys(old))

	start := time.Now()
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		d, err := cs.AppsV1().Deployments(ns).Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			return err
		}
		d.Spec.Template.Spec.Containers[0].Image = "registry.invalid/web:2"
		_, err = cs.AppsV1().Deployments(ns).Update(ctx, d, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}

	// Watch the old pods go: marked for deletion, then gone after their
	// grace period, while the Deployment already says it rolled out.
	deleting := map[string]time.Time{} // old pod → when its deletionTimestamp was seen
	deadline := map[string]time.Time{} // old pod → its deletionTimestamp: when its grace period ends
	gone := map[string]time.Time{}
	var rolledOutAt time.Time
	var terminatingSeen int32
	o.until(t, 60*time.Second, "the old pods to terminate", func(ev observation) bool {
		switch x := ev.obj.(type) {
		case *corev1.Pod:
			if !old[x.Name] {
				return false
			}
			if _, ok := deleting[x.Name]; !ok && x.DeletionTimestamp != nil {
				deleting[x.Name] = ev.at
				deadline[x.Name] = x.DeletionTimestamp.Time
				t.Logf("%5.1fs old pod %s terminating, deletionTimestamp %s (grace %ss)", since(start, ev.at),
					x.Name, x.DeletionTimestamp.Format(time.RFC3339), fmt.Sprint(deref(x.DeletionGracePeriodSeconds, -1)))
			}
			if ev.deleted {
				gone[x.Name] = ev.at
				t.Logf("%5.1fs old pod %s gone", since(start, ev.at), x.Name)
			}
		case *appsv1.Deployment:
			if tr := deref(x.Status.TerminatingReplicas, 0); tr > terminatingSeen {
				terminatingSeen = tr
			}
			if rolledOutAt.IsZero() && x.Spec.Template.Spec.Containers[0].Image == "registry.invalid/web:2" && rolledOut(x) {
				rolledOutAt = ev.at
				t.Logf("%5.1fs deployment rolled out: replicas %d, updated %d, available %d, terminating %s; old pods still there: %d",
					since(start, ev.at), x.Status.Replicas, x.Status.UpdatedReplicas, x.Status.AvailableReplicas,
					fmt.Sprint(deref(x.Status.TerminatingReplicas, -1)), len(old)-len(gone))
			}
		}
		return len(gone) == len(old) && !rolledOutAt.IsZero()
	})

	lastGone := time.Time{}
	for name := range old {
		del, ok := deleting[name]
		if !ok {
			t.Errorf("old pod %s went without a deletionTimestamp being seen", name)
			continue
		}
		// Gone when its grace period ends: the deletionTimestamp is cut to
		// whole seconds, and kwok and the watch take a moment.
		if late := gone[name].Sub(deadline[name]); late < -time.Second || late > 4*time.Second {
			t.Errorf("old pod %s was gone %s after its deletionTimestamp (seen %s after its deletion began); "+
				"want it gone when its grace period of %s ends", name, late, gone[name].Sub(del), grace)
		}
		if gone[name].After(lastGone) {
			lastGone = gone[name]
		}
	}
	if !rolledOutAt.Before(lastGone) {
		t.Errorf("the Deployment reported the rollout done at %.1fs, only after the last old pod was gone at %.1fs; "+
			"want it done while old pods are still terminating", since(start, rolledOutAt), since(start, lastGone))
	}
	if terminatingSeen == 0 {
		t.Errorf("the Deployment never reported status.terminatingReplicas > 0 while old pods terminated")
	}
}

func testFailingPod(t *testing.T, kubeconfig, how string) {
	ns := Namespace(t, kubeconfig)
	cs := clientset(t, kubeconfig)
	ctx := t.Context()
	o := observe(t, cs, ns)

	image := "registry.invalid/" + how + ":1"
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: how, Labels: map[string]string{"toa-test/fail": how}},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: ref[int64](2),
			Containers:                    []corev1.Container{{Name: "app", Image: image}},
		},
	}
	if _, err := cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	want := map[string]string{"crashloop": "CrashLoopBackOff", "imagepull": "ImagePullBackOff"}[how]
	var got *corev1.Pod
	o.until(t, 60*time.Second, "waiting reason "+want, func(ev observation) bool {
		p, ok := ev.obj.(*corev1.Pod)
		if !ok || p.Name != how {
			return false
		}
		if podReady(p) {
			t.Fatalf("pod %s labelled toa-test/fail=%s turned Ready", p.Name, how)
		}
		for _, c := range p.Status.ContainerStatuses {
			if c.State.Waiting != nil && c.State.Waiting.Reason == want {
				got = p
				return true
			}
		}
		return false
	})
	c := got.Status.ContainerStatuses[0]
	t.Logf("pod %s: phase %s, %s: %s, restarts %d", got.Name, got.Status.Phase, c.State.Waiting.Reason, c.State.Waiting.Message, c.RestartCount)
	if c.Ready {
		t.Errorf("container ready; want not ready")
	}
	switch how {
	case "crashloop":
		if got.Status.Phase != corev1.PodRunning {
			t.Errorf("phase %s; want Running", got.Status.Phase)
		}
		if c.RestartCount < 1 {
			t.Errorf("restartCount %d; want > 0", c.RestartCount)
		}
		if !strings.Contains(c.State.Waiting.Message, "restarting failed container=app") {
			t.Errorf("message %q; want the kubelet's back-off message", c.State.Waiting.Message)
		}
		if c.LastTerminationState.Terminated == nil || c.LastTerminationState.Terminated.ExitCode == 0 {
			t.Errorf("lastState %+v; want a failed run", c.LastTerminationState)
		}
	case "imagepull":
		if got.Status.Phase != corev1.PodPending {
			t.Errorf("phase %s; want Pending", got.Status.Phase)
		}
		if !strings.HasPrefix(c.State.Waiting.Message, fmt.Sprintf("Back-off pulling image %q", image)) {
			t.Errorf("message %q; want the kubelet's back-off message", c.State.Waiting.Message)
		}
	}

	// Deleted, the pod still goes over its grace period: the project's
	// stages leave deletion to kwok's own.
	start := time.Now()
	if err := cs.CoreV1().Pods(ns).Delete(ctx, how, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	o.until(t, 30*time.Second, "the deleted pod to go", func(ev observation) bool {
		p, ok := ev.obj.(*corev1.Pod)
		return ok && p.Name == how && ev.deleted
	})
	t.Logf("pod %s gone %.1fs after its deletion (grace period 2s)", how, time.Since(start).Seconds())
}

func since(start, at time.Time) float64 { return at.Sub(start).Seconds() }

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func ref[T any](v T) *T { return &v }

// deref is *p, or def if p is nil.
func deref[T any](p *T, def T) T {
	if p == nil {
		return def
	}
	return *p
}
