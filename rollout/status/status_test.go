package status

import (
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

func ptr[T any](v T) *T { return &v }

// deployment is a Deployment of 3 replicas at generation 2, rolled out, revision 2, with d's
// changes.
func deployment(change func(d *appsv1.Deployment)) *appsv1.Deployment {
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "composition-a", Namespace: "ns", UID: "d-uid", Generation: 2,
			Annotations: map[string]string{revisionAnnotation: "2"}},
		Spec: appsv1.DeploymentSpec{Replicas: ptr(int32(3))},
		Status: appsv1.DeploymentStatus{ObservedGeneration: 2, Replicas: 3, UpdatedReplicas: 3,
			ReadyReplicas: 3, AvailableReplicas: 3, TerminatingReplicas: ptr(int32(0)),
			Conditions: []appsv1.DeploymentCondition{{Type: appsv1.DeploymentProgressing, Status: "True", Reason: "NewReplicaSetAvailable"}}},
	}
	if change != nil {
		change(d)
	}
	return d
}

func TestDeploymentStatus(t *testing.T) {
	tests := []struct {
		name    string
		d       *appsv1.Deployment
		done    bool
		message string // a part of it
		failed  bool
	}{
		{"rolled out", deployment(nil), true, "rolled out", false},
		{"no terminatingReplicas from the server", deployment(func(d *appsv1.Deployment) { d.Status.TerminatingReplicas = nil }), true, "rolled out", false},
		{"spec not observed", deployment(func(d *appsv1.Deployment) { d.Generation = 3 }), false, "update to be observed", false},
		{"not observed hides a deadline", deployment(func(d *appsv1.Deployment) {
			d.Generation = 3
			d.Status.Conditions[0].Reason = timedOutReason
		}), false, "observed", false},
		{"observed generation ahead", deployment(func(d *appsv1.Deployment) { d.Status.ObservedGeneration = 3 }), true, "rolled out", false},
		{"deadline", deployment(func(d *appsv1.Deployment) {
			d.Status.Conditions[0] = appsv1.DeploymentCondition{Type: appsv1.DeploymentProgressing, Status: "False",
				Reason: timedOutReason, Message: `ReplicaSet "composition-a-1" has timed out progressing.`}
		}), false, "timed out progressing", true},
		{"new replicas not all updated", deployment(func(d *appsv1.Deployment) { d.Status.UpdatedReplicas = 1 }), false, "1 of 3 new replicas updated", false},
		{"old replicas", deployment(func(d *appsv1.Deployment) { d.Status.Replicas = 6 }), false, "3 old replicas pending termination", false},
		{"not available", deployment(func(d *appsv1.Deployment) { d.Status.AvailableReplicas = 2 }), false, "2 of 3 updated replicas available", false},
		{"terminating", deployment(func(d *appsv1.Deployment) { d.Status.TerminatingReplicas = ptr(int32(2)) }), false, "2 old pods terminating", false},
		{"scaled to zero", deployment(func(d *appsv1.Deployment) {
			d.Spec.Replicas = ptr(int32(0))
			d.Status = appsv1.DeploymentStatus{ObservedGeneration: 2}
		}), true, "rolled out", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			done, message, err := deploymentStatus(tt.d)
			if err != nil {
				message = err.Error()
			}
			if done != tt.done || (err != nil) != tt.failed || !strings.Contains(message, tt.message) {
				t.Errorf("DeploymentStatus = %v, %q, %v; want %v, %q, failed %v", done, message, err, tt.done, tt.message, tt.failed)
			}
		})
	}
}

var now = time.Date(2026, 8, 1, 12, 0, 0, 0, time.UTC)

func pod(name, hash string, change func(p *corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", Labels: map[string]string{templateHashLabel: hash},
			CreationTimestamp: metav1.NewTime(now.Add(-time.Minute))},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
	if change != nil {
		change(p)
	}
	return p
}

func waiting(reason, message string) func(p *corev1.Pod) {
	return func(p *corev1.Pod) {
		p.Status.ContainerStatuses = []corev1.ContainerStatus{
			{Name: "sidecar", Ready: true, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}},
			{Name: "app", RestartCount: 4, State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: message}},
				LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error"}}},
		}
	}
}

func unschedulable(since time.Time) func(p *corev1.Pod) {
	return func(p *corev1.Pod) {
		p.Status.Phase = corev1.PodPending
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse,
			Reason: corev1.PodReasonUnschedulable, Message: "0/1 nodes are available: 1 Insufficient cpu.",
			LastTransitionTime: metav1.NewTime(since)}}
	}
}

func TestPodFailure(t *testing.T) {
	grace := 30 * time.Second
	tests := []struct {
		name      string
		pod       *corev1.Pod
		reason    string // "" for none
		container string
		message   string
		recheck   time.Time
	}{
		{"running", pod("p", "h", nil), "", "", "", time.Time{}},
		{"crash loop", pod("p", "h", waiting("CrashLoopBackOff", "back-off 10s restarting failed container=app")),
			"CrashLoopBackOff", "app", "back-off 10s restarting failed container=app; last exit code 1 (Error), 4 restarts", time.Time{}},
		{"image pull back-off", pod("p", "h", waiting("ImagePullBackOff", `Back-off pulling image "x"`)), "ImagePullBackOff", "app", "pulling", time.Time{}},
		{"image pull error", pod("p", "h", waiting("ErrImagePull", "not found")), "ErrImagePull", "app", "not found", time.Time{}},
		{"config error", pod("p", "h", waiting("CreateContainerConfigError", `secret "s" not found`)), "CreateContainerConfigError", "app", `secret "s" not found`, time.Time{}},
		{"invalid image name", pod("p", "h", waiting("InvalidImageName", "bad")), "InvalidImageName", "app", "bad", time.Time{}},
		{"container creating", pod("p", "h", waiting("ContainerCreating", "")), "", "", "", time.Time{}},
		{"init container", pod("p", "h", func(p *corev1.Pod) {
			p.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: "init", State: corev1.ContainerState{
				Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff", Message: "m"}}}}
		}), "CrashLoopBackOff", "init", "m", time.Time{}},
		{"terminating pods do not fail", pod("p", "h", func(p *corev1.Pod) {
			waiting("CrashLoopBackOff", "m")(p)
			p.DeletionTimestamp = ptr(metav1.NewTime(now))
		}), "", "", "", time.Time{}},
		{"unschedulable within grace", pod("p", "h", unschedulable(now.Add(-10*time.Second))), "", "", "", now.Add(20 * time.Second)},
		{"unschedulable past grace", pod("p", "h", unschedulable(now.Add(-31*time.Second))), "Unschedulable", "",
			"0/1 nodes are available: 1 Insufficient cpu. (for 31s)", time.Time{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, recheck := podFailure(tt.pod, now, grace)
			if !recheck.Equal(tt.recheck) {
				t.Errorf("recheck = %v, want %v", recheck, tt.recheck)
			}
			if tt.reason == "" {
				if f != nil {
					t.Errorf("PodFailure = %v, want none", f)
				}
				return
			}
			if f == nil {
				t.Fatalf("PodFailure = none, want %s", tt.reason)
			}
			if f.Reason != tt.reason || f.Container != tt.container || f.Pod != "p" || !strings.Contains(f.Message, tt.message) {
				t.Errorf("PodFailure = %+v, want %s of container %q with %q", f, tt.reason, tt.container, tt.message)
			}
		})
	}
}

func replicaSet(name, hash, revision string, owner types.UID) *appsv1.ReplicaSet {
	return &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns",
		Labels:          map[string]string{templateHashLabel: hash},
		Annotations:     map[string]string{revisionAnnotation: revision},
		OwnerReferences: []metav1.OwnerReference{{Kind: "Deployment", Name: "composition-a", UID: owner, Controller: ptr(true)}}}}
}

func TestNewReplicaSet(t *testing.T) {
	old, cur := replicaSet("a-old", "old", "1", "d-uid"), replicaSet("a-new", "new", "2", "d-uid")
	stranger := replicaSet("b-new", "b", "2", "other-uid")
	if rs := newReplicaSet(deployment(nil), []*appsv1.ReplicaSet{stranger, old, cur}); rs != cur {
		t.Errorf("NewReplicaSet = %v, want a-new", rs)
	}
	if rs := newReplicaSet(deployment(func(d *appsv1.Deployment) { d.Generation = 3 }), []*appsv1.ReplicaSet{old, cur}); rs != nil {
		t.Errorf("NewReplicaSet of an unobserved spec = %v, want none", rs.Name)
	}
	if rs := newReplicaSet(deployment(func(d *appsv1.Deployment) { d.Annotations[revisionAnnotation] = "3" }), []*appsv1.ReplicaSet{old, cur}); rs != nil {
		t.Errorf("NewReplicaSet before the controller made it = %v, want none", rs.Name)
	}
}

func TestCheck(t *testing.T) {
	grace := 30 * time.Second
	rss := []*appsv1.ReplicaSet{replicaSet("a-old", "old", "1", "d-uid"), replicaSet("a-new", "new", "2", "d-uid")}
	crash := waiting("CrashLoopBackOff", "back-off")
	gone := func(p *corev1.Pod) { p.DeletionTimestamp = ptr(metav1.NewTime(now.Add(5 * time.Second))) }
	rolling := func(d *appsv1.Deployment) { d.Status.AvailableReplicas = 1 }
	tests := []struct {
		name    string
		d       *appsv1.Deployment
		pods    []*corev1.Pod
		done    bool
		failure string // Failure.Error(), a part of it
		message string
		recheck time.Time
	}{
		{name: "done, no pods left terminating", d: deployment(nil),
			pods: []*corev1.Pod{pod("a-new-1", "new", nil)}, done: true, message: "rolled out"},
		{name: "kubectl's conditions hold but old pods are terminating", d: deployment(nil),
			pods:    []*corev1.Pod{pod("a-new-1", "new", nil), pod("a-old-2", "old", gone), pod("a-old-1", "old", gone)},
			message: "2 old pods terminating: a-old-1, a-old-2"},
		{name: "the watch saw the pods go, the server still counts one", d: deployment(func(d *appsv1.Deployment) {
			d.Status.TerminatingReplicas = ptr(int32(1))
		}), pods: []*corev1.Pod{pod("a-new-1", "new", nil)}, message: "1 old pod terminating"},
		{name: "a new pod crash-loops", d: deployment(rolling),
			pods:    []*corev1.Pod{pod("a-old-1", "old", nil), pod("a-new-1", "new", crash)},
			failure: "deployment composition-a: pod a-new-1, container app: CrashLoopBackOff: back-off"},
		{name: "an old pod crash-loops: the new ones will replace it", d: deployment(rolling),
			pods:    []*corev1.Pod{pod("a-old-1", "old", crash), pod("a-new-1", "new", nil)},
			message: "1 of 3 updated replicas available"},
		{name: "the spec is not observed: no pod is judged", d: deployment(func(d *appsv1.Deployment) { d.Generation = 3 }),
			pods: []*corev1.Pod{pod("a-new-1", "new", crash)}, message: "observed"},
		{name: "unschedulable within grace", d: deployment(rolling),
			pods:    []*corev1.Pod{pod("a-new-1", "new", unschedulable(now.Add(-20*time.Second))), pod("a-new-2", "new", unschedulable(now.Add(-25*time.Second)))},
			message: "available", recheck: now.Add(5 * time.Second)},
		{name: "unschedulable past grace", d: deployment(rolling),
			pods:    []*corev1.Pod{pod("a-new-1", "new", unschedulable(now.Add(-40*time.Second)))},
			failure: "pod a-new-1: Unschedulable: 0/1 nodes are available"},
		{name: "progress deadline", d: deployment(func(d *appsv1.Deployment) {
			d.Status.Conditions[0].Reason, d.Status.Conditions[0].Message = timedOutReason, "has timed out progressing"
		}), failure: "deployment composition-a: ProgressDeadlineExceeded: has timed out progressing"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := CheckDeployment(tt.d, rss, tt.pods, now, grace)
			if tt.failure != "" {
				if s.Failure == nil || !strings.Contains(s.Failure.Error(), tt.failure) {
					t.Fatalf("Check = %+v, want the failure %q", s, tt.failure)
				}
				return
			}
			if s.Failure != nil || s.Done != tt.done || !strings.Contains(s.Message, tt.message) || !s.Recheck.Equal(tt.recheck) {
				t.Errorf("Check = %+v, want done %v, %q, recheck %v", s, tt.done, tt.message, tt.recheck)
			}
		})
	}
}
