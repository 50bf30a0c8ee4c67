package status

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

const (
	revisionAnnotation = "deployment.kubernetes.io/revision"
	timedOutReason     = "ProgressDeadlineExceeded"
	templateHashLabel  = "pod-template-hash"
)

// failingReasons are the waiting reasons of a container that will not start without a change:
// the kubelet keeps backing off, and the rollout cannot finish before the progress deadline.
var failingReasons = []string{
	"CrashLoopBackOff",
	"ImagePullBackOff",
	"ErrImagePull",
	"CreateContainerConfigError",
	"InvalidImageName",
}

// State is where one object's rollout stands.
type State struct {
	Done    bool
	Message string   // what is awaited, or that it rolled out
	Failure *Failure // the rollout cannot succeed
	// Recheck is when to look again although nothing changes: the end of an unschedulable
	// pod's grace. Zero when nothing is due.
	Recheck time.Time
}

// Failure is a rollout that cannot succeed, and why: the object (a Deployment, StatefulSet,
// DaemonSet, Job or custom resource) by kind and name, and the pod and container where the
// reason is one's.
type Failure struct {
	Group     string `json:"group,omitempty"`
	Kind      string `json:"kind"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Deployment is Name again when the object is a Deployment, as -o json has said since
	// before the wait knew other kinds.
	Deployment string `json:"deployment,omitempty"`
	Pod        string `json:"pod,omitempty"`
	Container  string `json:"container,omitempty"`
	Reason     string `json:"reason"`
	Message    string `json:"message,omitempty"`
	// Pods explain the failure: the failing pod, or the object's pods that are not ready
	// when the reason is the object's.
	Pods []PodReport `json:"pods,omitempty"`
}

func (f *Failure) Error() string {
	var b strings.Builder
	b.WriteString(f.object())
	if f.Pod != "" {
		fmt.Fprintf(&b, ": pod %s", f.Pod)
	}
	if f.Container != "" {
		fmt.Fprintf(&b, ", container %s", f.Container)
	}
	fmt.Fprintf(&b, ": %s", f.Reason)
	if f.Message != "" {
		fmt.Fprintf(&b, ": %s", f.Message)
	}
	return b.String()
}

// object is the failed object as the words say it: "deployment composition-a" (a Failure made
// with only Deployment set is a Deployment's).
func (f *Failure) object() string {
	kind, name := cmp.Or(f.Kind, deploymentKind.Kind), cmp.Or(f.Name, f.Deployment)
	return strings.ToLower(kind) + " " + name
}

// deploymentStatus is kubectl rollout status's verdict on a Deployment (kubectl
// pkg/polymorphichelpers/rollout_status.go), made stricter by status.terminatingReplicas where
// the server reports it: done, or what is awaited, or a *Failure when the progress deadline has
// passed.
func deploymentStatus(d *appsv1.Deployment) (done bool, message string, err error) {
	if done, message, err = kubectlStatus(d); !done || err != nil {
		return done, message, err
	}
	if n := d.Status.TerminatingReplicas; n != nil && *n > 0 {
		return false, fmt.Sprintf("%s terminating", count(*n, "old pod")), nil
	}
	return true, message, nil
}

// kubectlStatus is kubectl rollout status's verdict alone.
func kubectlStatus(d *appsv1.Deployment) (done bool, message string, err error) {
	if d.Generation > d.Status.ObservedGeneration {
		return false, "waiting for the deployment spec update to be observed", nil
	}
	if c := condition(d, appsv1.DeploymentProgressing); c != nil && c.Reason == timedOutReason {
		return false, "", failureOf(objectOf(d), &Failure{Reason: timedOutReason, Message: c.Message})
	}
	s := d.Status
	if d.Spec.Replicas != nil && s.UpdatedReplicas < *d.Spec.Replicas {
		return false, fmt.Sprintf("%d of %d new replicas updated", s.UpdatedReplicas, *d.Spec.Replicas), nil
	}
	if s.Replicas > s.UpdatedReplicas {
		return false, fmt.Sprintf("%s pending termination", count(s.Replicas-s.UpdatedReplicas, "old replica")), nil
	}
	if s.AvailableReplicas < s.UpdatedReplicas {
		return false, fmt.Sprintf("%d of %d updated replicas available", s.AvailableReplicas, s.UpdatedReplicas), nil
	}
	return true, "rolled out", nil
}

// count is "1 old pod", "2 old pods".
func count[N int | int32](n N, noun string) string {
	if n == 1 {
		return fmt.Sprintf("%d %s", n, noun)
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

func condition(d *appsv1.Deployment, t appsv1.DeploymentConditionType) *appsv1.DeploymentCondition {
	i := slices.IndexFunc(d.Status.Conditions, func(c appsv1.DeploymentCondition) bool { return c.Type == t })
	if i < 0 {
		return nil
	}
	return &d.Status.Conditions[i]
}

// newReplicaSet is the Deployment's current ReplicaSet among rss: one it controls whose revision
// is the Deployment's. Nil until the controller has made it and said so.
func newReplicaSet(d *appsv1.Deployment, rss []*appsv1.ReplicaSet) *appsv1.ReplicaSet {
	revision := d.Annotations[revisionAnnotation]
	if revision == "" || d.Generation > d.Status.ObservedGeneration {
		return nil
	}
	for _, rs := range rss {
		owner := metav1.GetControllerOf(rs)
		if owner != nil && owner.UID == d.UID && rs.Annotations[revisionAnnotation] == revision {
			return rs
		}
	}
	return nil
}

// podFailure says why a pod of a new ReplicaSet will not become ready without a change: a
// container (or init container) waiting for one of failingReasons, or the pod unschedulable for
// longer than grace. When the pod is unschedulable but within its grace, recheck is when the
// grace ends.
func podFailure(pod *corev1.Pod, now time.Time, grace time.Duration) (f *Failure, recheck time.Time) {
	if pod.DeletionTimestamp != nil {
		return nil, time.Time{}
	}
	statuses := slices.Concat(pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses)
	for _, c := range statuses {
		if w := c.State.Waiting; w != nil && slices.Contains(failingReasons, w.Reason) {
			return &Failure{Namespace: pod.Namespace, Pod: pod.Name, Container: c.Name, Reason: w.Reason,
				Message: waitingMessage(c)}, time.Time{}
		}
	}
	for _, c := range pod.Status.Conditions {
		if c.Type != corev1.PodScheduled || c.Status != corev1.ConditionFalse || c.Reason != corev1.PodReasonUnschedulable {
			continue
		}
		since := c.LastTransitionTime.Time
		if since.IsZero() {
			since = pod.CreationTimestamp.Time
		}
		if end := since.Add(grace); now.Before(end) {
			return nil, end
		}
		return &Failure{Namespace: pod.Namespace, Pod: pod.Name, Reason: corev1.PodReasonUnschedulable,
			Message: fmt.Sprintf("%s (for %s)", c.Message, now.Sub(since).Round(time.Second))}, time.Time{}
	}
	return nil, time.Time{}
}

// waitingMessage is the kubelet's message, with the last exit where the container ran.
func waitingMessage(c corev1.ContainerStatus) string {
	msg := c.State.Waiting.Message
	if t := c.LastTerminationState.Terminated; t != nil {
		last := fmt.Sprintf("last exit code %d", t.ExitCode)
		if t.Reason != "" {
			last += " (" + t.Reason + ")"
		}
		if t.Message != "" {
			last += ": " + strings.TrimSpace(t.Message)
		}
		if msg != "" {
			msg += "; "
		}
		msg += fmt.Sprintf("%s, %d restarts", last, c.RestartCount)
	}
	return msg
}

// terminating are the pods that have been told to go and are not gone yet.
func terminating(pods []*corev1.Pod) []*corev1.Pod {
	var out []*corev1.Pod
	for _, p := range pods {
		if p.DeletionTimestamp != nil {
			out = append(out, p)
		}
	}
	return out
}

// CheckDeployment is the whole verdict on a Deployment, given the ReplicaSets and pods its selector
// matches: failed as soon as a failure is certain (the progress deadline passed, a pod of the new
// ReplicaSet fails), done when kubectl's rollout conditions hold and no pod it selected is
// terminating, else what is awaited.
func CheckDeployment(d *appsv1.Deployment, rss []*appsv1.ReplicaSet, pods []*corev1.Pod, now time.Time, grace time.Duration) State {
	done, message, err := kubectlStatus(d)
	if err != nil {
		f := err.(*Failure)
		return State{Message: f.Reason, Failure: f}
	}
	var recheck time.Time
	if rs := newReplicaSet(d, rss); rs != nil {
		hash := rs.Labels[templateHashLabel]
		isNew := func(p *corev1.Pod) bool { return hash != "" && p.Labels[templateHashLabel] == hash }
		var f *Failure
		if f, recheck = newPodFailure(objectOf(d), pods, isNew, now, grace); f != nil {
			return State{Message: f.Reason, Failure: f}
		}
	}
	if st := settled(done, message, pods, recheck); !st.Done {
		return st
	}
	// the pods already gone from the watch, and the server still counting some
	if done, message, _ = deploymentStatus(d); !done {
		return State{Message: message, Recheck: recheck}
	}
	return State{Done: true, Message: message}
}

// object names the object a verdict is on, for its Failure.
type object struct {
	kind            schema.GroupKind
	namespace, name string
}

func objectOf(d *appsv1.Deployment) object { return object{deploymentKind, d.Namespace, d.Name} }

func terminatingMessage(pods []*corev1.Pod) string {
	names := make([]string, 0, len(pods))
	for _, p := range sortedPods(pods) {
		names = append(names, p.Name)
	}
	return fmt.Sprintf("%s terminating: %s", count(len(names), "old pod"), strings.Join(names, ", "))
}

func sortedPods(pods []*corev1.Pod) []*corev1.Pod {
	out := slices.Clone(pods)
	slices.SortFunc(out, func(a, b *corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
	return out
}
