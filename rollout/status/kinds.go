package status

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/scheme"
)

// The kinds the wait awaits beside Deployments (status.go): StatefulSets, DaemonSets and Jobs,
// judged as kubectl rollout status judges them and by the pods they own, and custom resources by
// the standard conditions (Ready, Stalled, Reconciling) as kstatus reads them. Each verdict is a
// pure function of the object and its pods, as CheckDeployment is of a Deployment.

// The kinds of workloads the wait knows.
var (
	deploymentKind  = schema.GroupKind{Group: "apps", Kind: "Deployment"}
	statefulSetKind = schema.GroupKind{Group: "apps", Kind: "StatefulSet"}
	daemonSetKind   = schema.GroupKind{Group: "apps", Kind: "DaemonSet"}
	jobKind         = schema.GroupKind{Group: "batch", Kind: "Job"}
)

const (
	revisionHashLabel            = appsv1.ControllerRevisionHashLabelKey // on a StatefulSet's pod: its revision
	templateGenerationLabel      = "pod-template-generation"             // on a DaemonSet's pod: its template's generation
	templateGenerationAnnotation = appsv1.DeprecatedTemplateGeneration   // on a DaemonSet: its template's generation
)

// Workload says whether a kind is one of the workloads the wait knows, which own pods.
func Workload(gk schema.GroupKind) bool {
	return gk == deploymentKind || gk == statefulSetKind || gk == daemonSetKind || gk == jobKind
}

// Custom says whether a kind is a custom resource's: of a group Kubernetes itself does not serve
// (client-go's scheme has every built-in group). The API extension kinds are not: a
// CustomResourceDefinition is awaited by the apply (Established), an APIService has no Ready.
func Custom(gk schema.GroupKind) bool {
	return gk.Group != "" && !scheme.Scheme.IsGroupRegistered(gk.Group) &&
		gk.Group != "apiextensions.k8s.io" && gk.Group != "apiregistration.k8s.io"
}

// Awaited says whether the wait awaits an applied object of a kind: workloads, and custom
// resources (those without conditions are found done at their first check).
func Awaited(gk schema.GroupKind) bool { return Workload(gk) || Custom(gk) }

// statefulSetStatus is kubectl rollout status's verdict on a StatefulSet, with the partition
// respected and the strategy OnDelete awaited only until its pods are ready: it updates no pod
// until someone deletes it.
func statefulSetStatus(s *appsv1.StatefulSet) (done bool, message string) {
	if s.Status.ObservedGeneration == 0 || s.Generation > s.Status.ObservedGeneration {
		return false, "waiting for the statefulset spec update to be observed"
	}
	replicas := int32(1)
	if s.Spec.Replicas != nil {
		replicas = *s.Spec.Replicas
	}
	st := s.Status
	ready := func() (bool, string) {
		switch {
		case st.ReadyReplicas < replicas:
			return false, fmt.Sprintf("%d of %d pods ready", st.ReadyReplicas, replicas)
		case s.Spec.MinReadySeconds > 0 && st.AvailableReplicas < replicas:
			return false, fmt.Sprintf("%d of %d pods available", st.AvailableReplicas, replicas)
		case st.Replicas > replicas:
			return false, fmt.Sprintf("%s to go", count(st.Replicas-replicas, "pod"))
		}
		return true, ""
	}
	if s.Spec.UpdateStrategy.Type == appsv1.OnDeleteStatefulSetStrategyType {
		if ok, msg := ready(); !ok {
			return false, msg
		}
		return true, "ready (OnDelete: its pods are updated when they are deleted)"
	}
	var partition int32
	if ru := s.Spec.UpdateStrategy.RollingUpdate; ru != nil && ru.Partition != nil {
		partition = min(*ru.Partition, replicas)
	}
	if want := replicas - partition; st.UpdatedReplicas < want {
		return false, fmt.Sprintf("%d of %d pods updated to revision %s", st.UpdatedReplicas, want, st.UpdateRevision)
	}
	if ok, msg := ready(); !ok {
		return false, msg
	}
	if partition > 0 {
		return true, fmt.Sprintf("rolled out to %d pods (partition %d)", replicas-partition, partition)
	}
	if st.UpdateRevision != st.CurrentRevision {
		return false, fmt.Sprintf("waiting for revision %s to become current", st.UpdateRevision)
	}
	return true, fmt.Sprintf("rolled out: %s at revision %s", count(replicas, "pod"), st.CurrentRevision)
}

// CheckStatefulSet is the whole verdict on a StatefulSet, given the pods its selector matches:
// failed as soon as a pod of the update revision fails, done when statefulSetStatus holds and no
// pod of it is terminating, else what is awaited.
func CheckStatefulSet(s *appsv1.StatefulSet, pods []*corev1.Pod, now time.Time, grace time.Duration) State {
	pods = controlledBy(pods, s)
	isNew := func(p *corev1.Pod) bool {
		return s.Status.UpdateRevision == "" || p.Labels[revisionHashLabel] == s.Status.UpdateRevision
	}
	done, message := statefulSetStatus(s)
	return podsVerdict(object{statefulSetKind, s.Namespace, s.Name},
		observed(s.Generation, s.Status.ObservedGeneration), done, message, pods, isNew, now, grace)
}

// daemonSetStatus is kubectl rollout status's verdict on a DaemonSet; the strategy OnDelete is
// awaited only until a pod is available on every node that should run one.
func daemonSetStatus(d *appsv1.DaemonSet) (done bool, message string) {
	if d.Generation > d.Status.ObservedGeneration {
		return false, "waiting for the daemonset spec update to be observed"
	}
	st := d.Status
	if d.Spec.UpdateStrategy.Type != appsv1.OnDeleteDaemonSetStrategyType && st.UpdatedNumberScheduled < st.DesiredNumberScheduled {
		return false, fmt.Sprintf("%d of %d new pods scheduled", st.UpdatedNumberScheduled, st.DesiredNumberScheduled)
	}
	if st.NumberAvailable < st.DesiredNumberScheduled {
		return false, fmt.Sprintf("%d of %d pods available", st.NumberAvailable, st.DesiredNumberScheduled)
	}
	if d.Spec.UpdateStrategy.Type == appsv1.OnDeleteDaemonSetStrategyType {
		return true, "available (OnDelete: its pods are updated when they are deleted)"
	}
	return true, fmt.Sprintf("rolled out to %s", count(st.DesiredNumberScheduled, "node"))
}

// CheckDaemonSet is the whole verdict on a DaemonSet, given the pods its selector matches:
// failed as soon as a pod of its current template fails, done when daemonSetStatus holds and no
// pod of it is terminating, else what is awaited.
func CheckDaemonSet(d *appsv1.DaemonSet, pods []*corev1.Pod, now time.Time, grace time.Duration) State {
	pods = controlledBy(pods, d)
	generation := d.Annotations[templateGenerationAnnotation]
	isNew := func(p *corev1.Pod) bool { return generation == "" || p.Labels[templateGenerationLabel] == generation }
	done, message := daemonSetStatus(d)
	return podsVerdict(object{daemonSetKind, d.Namespace, d.Name},
		observed(d.Generation, d.Status.ObservedGeneration), done, message, pods, isNew, now, grace)
}

// CheckJob is the verdict on a Job, given the pods its selector matches: done when Complete;
// failed when the controller says it failed or will (Failed, FailureTarget: BackoffLimitExceeded,
// DeadlineExceeded...) or as soon as a pod of it will not start without a change (a crash loop, an
// image that cannot be pulled); a suspended Job is not awaited.
func CheckJob(j *batchv1.Job, pods []*corev1.Pod, now time.Time, grace time.Duration) State {
	ref := object{jobKind, j.Namespace, j.Name}
	for _, t := range []batchv1.JobConditionType{batchv1.JobFailed, batchv1.JobFailureTarget} {
		if c := jobCondition(j, t); c != nil {
			f := failureOf(ref, &Failure{Reason: c.Reason, Message: c.Message})
			if f.Reason == "" {
				f.Reason = string(t)
			}
			return State{Message: f.Reason, Failure: f}
		}
	}
	st := j.Status
	if jobCondition(j, batchv1.JobComplete) != nil {
		return State{Done: true, Message: fmt.Sprintf("complete: %d succeeded", st.Succeeded)}
	}
	if j.Spec.Suspend != nil && *j.Spec.Suspend {
		return State{Done: true, Message: "suspended: not awaited"}
	}
	completions := int32(1)
	if j.Spec.Completions != nil {
		completions = *j.Spec.Completions
	}
	message := fmt.Sprintf("%d of %d completions, %d active, %d failed", st.Succeeded, completions, st.Active, st.Failed)
	return podsVerdict(ref, true, false, message, controlledBy(pods, j), func(*corev1.Pod) bool { return true }, now, grace)
}

func jobCondition(j *batchv1.Job, t batchv1.JobConditionType) *batchv1.JobCondition {
	i := slices.IndexFunc(j.Status.Conditions, func(c batchv1.JobCondition) bool {
		return c.Type == t && c.Status == corev1.ConditionTrue
	})
	if i < 0 {
		return nil
	}
	return &j.Status.Conditions[i]
}

// podsVerdict is a workload's verdict from its own (done, message) and the pods it controls: the
// first failure of a pod of its new revision (isNew) once the spec is observed, else not done
// while one of its pods terminates (the promise of a Deployment's wait: nothing old still runs).
func podsVerdict(ref object, observed, done bool, message string, pods []*corev1.Pod, isNew func(*corev1.Pod) bool,
	now time.Time, grace time.Duration) State {
	var recheck time.Time
	if observed {
		var f *Failure
		if f, recheck = newPodFailure(ref, pods, isNew, now, grace); f != nil {
			return State{Message: f.Reason, Failure: f}
		}
	}
	return settled(done, message, pods, recheck)
}

// newPodFailure is the first failure of a pod of the new revision (isNew), named as ref's, or
// when to look again at the earliest pod whose verdict waits on time.
func newPodFailure(ref object, pods []*corev1.Pod, isNew func(*corev1.Pod) bool, now time.Time, grace time.Duration) (*Failure, time.Time) {
	var recheck time.Time
	for _, p := range sortedPods(pods) {
		if !isNew(p) {
			continue
		}
		f, at := podFailure(p, now, grace)
		if f != nil {
			return failureOf(ref, f), time.Time{}
		}
		if !at.IsZero() && (recheck.IsZero() || at.Before(recheck)) {
			recheck = at
		}
	}
	return nil, recheck
}

// settled is done only when the workload says so and none of its pods is terminating.
func settled(done bool, message string, pods []*corev1.Pod, recheck time.Time) State {
	if !done {
		return State{Message: message, Recheck: recheck}
	}
	if gone := terminating(pods); len(gone) > 0 {
		return State{Message: terminatingMessage(gone), Recheck: recheck}
	}
	return State{Done: true, Message: message}
}

func observed(generation, observedGeneration int64) bool { return generation <= observedGeneration }

// controlledBy are the pods among pods that owner controls: a selector may match another's.
func controlledBy(pods []*corev1.Pod, owner metav1.Object) []*corev1.Pod {
	return slices.DeleteFunc(slices.Clone(pods), func(p *corev1.Pod) bool { return !metav1.IsControlledBy(p, owner) })
}

// failureOf names the object in f.
func failureOf(ref object, f *Failure) *Failure {
	f.Group, f.Kind, f.Namespace, f.Name = ref.kind.Group, ref.kind.Kind, ref.namespace, ref.name
	if ref.kind == deploymentKind {
		f.Deployment = ref.name
	}
	return f
}

// The standard conditions of a custom resource (kstatus's convention, which Flux, Crossplane and
// Cluster API follow).
const (
	conditionReady       = "Ready"
	conditionStalled     = "Stalled"
	conditionReconciling = "Reconciling"
)

// resourceCondition is one of status.conditions, as metav1.Condition has it.
type resourceCondition struct {
	Type               string `json:"type"`
	Status             string `json:"status"`
	Reason             string `json:"reason,omitempty"`
	Message            string `json:"message,omitempty"`
	ObservedGeneration int64  `json:"observedGeneration,omitempty"`
}

// CheckConditions is the verdict on a custom resource from its status: with no conditions, or
// none of Ready, Stalled and Reconciling, it is not awaited (done at once); a status of an earlier
// generation is awaited until the controller observes this one; Stalled=True fails; Reconciling=True
// is in progress; Ready=True is done, Ready=False fails with its reason, Ready=Unknown is awaited.
func CheckConditions(obj *unstructured.Unstructured) State {
	ref := object{obj.GroupVersionKind().GroupKind(), obj.GetNamespace(), obj.GetName()}
	var status struct {
		ObservedGeneration *int64              `json:"observedGeneration"`
		Conditions         []resourceCondition `json:"conditions"`
	}
	if m, ok := obj.Object["status"].(map[string]any); ok {
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(m, &status); err != nil {
			return State{Done: true, Message: "status.conditions unreadable: not awaited"}
		}
	}
	if len(status.Conditions) == 0 {
		return State{Done: true, Message: "no status conditions: not awaited"}
	}
	generation := obj.GetGeneration()
	if og := status.ObservedGeneration; og != nil && *og < generation {
		return State{Message: fmt.Sprintf("waiting for generation %d to be observed (status is of %d)", generation, *og)}
	}
	find := func(t string) *resourceCondition {
		i := slices.IndexFunc(status.Conditions, func(c resourceCondition) bool { return c.Type == t })
		if i < 0 {
			return nil
		}
		return &status.Conditions[i]
	}
	stale := func(c *resourceCondition) bool { return c.ObservedGeneration != 0 && c.ObservedGeneration < generation }
	stalled, reconciling, ready := find(conditionStalled), find(conditionReconciling), find(conditionReady)
	if stalled != nil && stalled.Status == "True" && !stale(stalled) {
		f := failureOf(ref, &Failure{Reason: cmp.Or(stalled.Reason, conditionStalled), Message: stalled.Message})
		return State{Message: f.Reason, Failure: f}
	}
	if reconciling != nil && reconciling.Status == "True" {
		return State{Message: conditionMessage("reconciling", reconciling)}
	}
	switch {
	case ready == nil:
		return State{Done: true, Message: "no Ready condition: not awaited"}
	case stale(ready):
		return State{Message: fmt.Sprintf("waiting for generation %d to be observed (Ready is of %d)", generation, ready.ObservedGeneration)}
	case ready.Status == "True":
		return State{Done: true, Message: conditionMessage("ready", ready)}
	case ready.Status == "False":
		f := failureOf(ref, &Failure{Reason: cmp.Or(ready.Reason, "NotReady"), Message: ready.Message})
		return State{Message: f.Reason, Failure: f}
	}
	return State{Message: conditionMessage("Ready "+cmp.Or(ready.Status, "Unknown"), ready)}
}

// conditionMessage is what a condition says: "ready: ReconciliationSucceeded: applied revision 3".
func conditionMessage(what string, c *resourceCondition) string {
	parts := []string{what}
	if c.Reason != "" {
		parts = append(parts, c.Reason)
	}
	if c.Message != "" {
		parts = append(parts, oneLine(c.Message))
	}
	return strings.Join(parts, ": ")
}
