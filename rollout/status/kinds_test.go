package status

import (
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

// owned is a pod controlled by the object of uid, with more labels.
func owned(name string, uid types.UID, labels map[string]string, change func(p *corev1.Pod)) *corev1.Pod {
	p := pod(name, "", change)
	p.Labels = labels
	p.OwnerReferences = []metav1.OwnerReference{{Name: "owner", UID: uid, Controller: ptr(true)}}
	return p
}

// statefulSet is a StatefulSet of 3 replicas at generation 2, rolled out at revision db-2.
func statefulSet(change func(s *appsv1.StatefulSet)) *appsv1.StatefulSet {
	s := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "ns", UID: "s-uid", Generation: 2},
		Spec: appsv1.StatefulSetSpec{Replicas: ptr(int32(3)), UpdateStrategy: appsv1.StatefulSetUpdateStrategy{
			Type: appsv1.RollingUpdateStatefulSetStrategyType, RollingUpdate: &appsv1.RollingUpdateStatefulSetStrategy{Partition: ptr(int32(0))}}},
		Status: appsv1.StatefulSetStatus{ObservedGeneration: 2, Replicas: 3, ReadyReplicas: 3, AvailableReplicas: 3,
			CurrentReplicas: 3, UpdatedReplicas: 3, CurrentRevision: "db-2", UpdateRevision: "db-2"},
	}
	if change != nil {
		change(s)
	}
	return s
}

func TestCheckStatefulSet(t *testing.T) {
	grace := 30 * time.Second
	rev := func(r string) map[string]string { return map[string]string{revisionHashLabel: r} }
	crash := waiting("CrashLoopBackOff", "back-off")
	updating := func(s *appsv1.StatefulSet) {
		s.Status.UpdateRevision, s.Status.UpdatedReplicas, s.Status.CurrentReplicas, s.Status.ReadyReplicas = "db-3", 1, 2, 2
	}
	tests := []struct {
		name    string
		s       *appsv1.StatefulSet
		pods    []*corev1.Pod
		done    bool
		message string // a part of it, or of the failure
		failed  bool
	}{
		{name: "rolled out", s: statefulSet(nil), pods: []*corev1.Pod{owned("db-0", "s-uid", rev("db-2"), nil)}, done: true, message: "3 pods at revision db-2"},
		{name: "spec not observed", s: statefulSet(func(s *appsv1.StatefulSet) { s.Generation = 3 }), message: "update to be observed"},
		{name: "never observed", s: statefulSet(func(s *appsv1.StatefulSet) { s.Status = appsv1.StatefulSetStatus{} }), message: "observed"},
		{name: "updating", s: statefulSet(updating), message: "1 of 3 pods updated to revision db-3"},
		{name: "updated, not ready", s: statefulSet(func(s *appsv1.StatefulSet) { s.Status.ReadyReplicas = 2 }), message: "2 of 3 pods ready"},
		{name: "updated, revision not current yet", s: statefulSet(func(s *appsv1.StatefulSet) { s.Status.UpdateRevision = "db-3" }),
			message: "revision db-3 to become current"},
		{name: "partition respected", s: statefulSet(func(s *appsv1.StatefulSet) {
			s.Spec.UpdateStrategy.RollingUpdate.Partition = ptr(int32(2))
			s.Status.UpdateRevision, s.Status.UpdatedReplicas = "db-3", 1
		}), done: true, message: "rolled out to 1 pods (partition 2)"},
		{name: "partition not reached", s: statefulSet(func(s *appsv1.StatefulSet) {
			s.Spec.UpdateStrategy.RollingUpdate.Partition = ptr(int32(1))
			s.Status.UpdateRevision, s.Status.UpdatedReplicas = "db-3", 1
		}), message: "1 of 2 pods updated"},
		{name: "OnDelete: the update is not awaited", s: statefulSet(func(s *appsv1.StatefulSet) {
			s.Spec.UpdateStrategy = appsv1.StatefulSetUpdateStrategy{Type: appsv1.OnDeleteStatefulSetStrategyType}
			s.Status.UpdateRevision, s.Status.UpdatedReplicas = "db-3", 0
		}), done: true, message: "OnDelete"},
		{name: "OnDelete still awaits ready pods", s: statefulSet(func(s *appsv1.StatefulSet) {
			s.Spec.UpdateStrategy = appsv1.StatefulSetUpdateStrategy{Type: appsv1.OnDeleteStatefulSetStrategyType}
			s.Status.ReadyReplicas = 1
		}), message: "1 of 3 pods ready"},
		{name: "a pod of the update revision crash-loops", s: statefulSet(updating),
			pods:    []*corev1.Pod{owned("db-2", "s-uid", rev("db-3"), crash)},
			message: "statefulset db: pod db-2, container app: CrashLoopBackOff", failed: true},
		{name: "a pod of the old revision crash-loops: it will be replaced", s: statefulSet(updating),
			pods: []*corev1.Pod{owned("db-0", "s-uid", rev("db-2"), crash)}, message: "1 of 3 pods updated"},
		{name: "another's pod", s: statefulSet(updating),
			pods: []*corev1.Pod{owned("x-0", "other", rev("db-3"), crash)}, message: "1 of 3 pods updated"},
		{name: "a pod terminating", s: statefulSet(nil),
			pods:    []*corev1.Pod{owned("db-3", "s-uid", rev("db-2"), func(p *corev1.Pod) { p.DeletionTimestamp = ptr(metav1.NewTime(now)) })},
			message: "1 old pod terminating: db-3"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := CheckStatefulSet(tt.s, tt.pods, now, grace)
			assertState(t, st, tt.done, tt.failed, tt.message)
			if st.Failure != nil && (st.Failure.Kind != "StatefulSet" || st.Failure.Name != "db" || st.Failure.Deployment != "") {
				t.Errorf("the failure names %+v, want StatefulSet db", st.Failure)
			}
		})
	}
}

func assertState(t *testing.T, st State, done, failed bool, message string) {
	t.Helper()
	got := st.Message
	if st.Failure != nil {
		got = st.Failure.Error()
	}
	if st.Done != done || (st.Failure != nil) != failed || !strings.Contains(got, message) {
		t.Errorf("verdict = done %v, %q, failure %v; want done %v, %q, failed %v", st.Done, st.Message, st.Failure, done, message, failed)
	}
}

func daemonSet(change func(d *appsv1.DaemonSet)) *appsv1.DaemonSet {
	d := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "agent", Namespace: "ns", UID: "ds-uid", Generation: 2,
			Annotations: map[string]string{templateGenerationAnnotation: "2"}},
		Spec: appsv1.DaemonSetSpec{UpdateStrategy: appsv1.DaemonSetUpdateStrategy{Type: appsv1.RollingUpdateDaemonSetStrategyType}},
		Status: appsv1.DaemonSetStatus{ObservedGeneration: 2, DesiredNumberScheduled: 2, CurrentNumberScheduled: 2,
			UpdatedNumberScheduled: 2, NumberAvailable: 2, NumberReady: 2},
	}
	if change != nil {
		change(d)
	}
	return d
}

func TestCheckDaemonSet(t *testing.T) {
	gen := func(g string) map[string]string { return map[string]string{templateGenerationLabel: g} }
	crash := waiting("ImagePullBackOff", "Back-off pulling image")
	updating := func(d *appsv1.DaemonSet) { d.Status.UpdatedNumberScheduled = 1 }
	tests := []struct {
		name    string
		d       *appsv1.DaemonSet
		pods    []*corev1.Pod
		done    bool
		message string
		failed  bool
	}{
		{name: "rolled out", d: daemonSet(nil), done: true, message: "rolled out to 2 nodes"},
		{name: "spec not observed", d: daemonSet(func(d *appsv1.DaemonSet) { d.Generation = 3 }), message: "observed"},
		{name: "updating", d: daemonSet(updating), message: "1 of 2 new pods scheduled"},
		{name: "not available", d: daemonSet(func(d *appsv1.DaemonSet) { d.Status.NumberAvailable = 1 }), message: "1 of 2 pods available"},
		{name: "OnDelete", d: daemonSet(func(d *appsv1.DaemonSet) {
			d.Spec.UpdateStrategy.Type = appsv1.OnDeleteDaemonSetStrategyType
			updating(d)
		}), done: true, message: "OnDelete"},
		{name: "a new pod cannot pull its image", d: daemonSet(updating),
			pods: []*corev1.Pod{owned("agent-x", "ds-uid", gen("2"), crash)}, message: "daemonset agent: pod agent-x, container app: ImagePullBackOff", failed: true},
		{name: "an old pod fails: it will be replaced", d: daemonSet(updating),
			pods: []*corev1.Pod{owned("agent-y", "ds-uid", gen("1"), crash)}, message: "1 of 2 new pods scheduled"},
		{name: "an old pod terminating", d: daemonSet(nil),
			pods:    []*corev1.Pod{owned("agent-y", "ds-uid", gen("1"), func(p *corev1.Pod) { p.DeletionTimestamp = ptr(metav1.NewTime(now)) })},
			message: "1 old pod terminating: agent-y"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assertState(t, CheckDaemonSet(tt.d, tt.pods, now, 30*time.Second), tt.done, tt.failed, tt.message)
		})
	}
}

func job(change func(j *batchv1.Job)) *batchv1.Job {
	j := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: "migrate", Namespace: "ns", UID: "j-uid", Generation: 1},
		Spec:       batchv1.JobSpec{Completions: ptr(int32(1))},
		Status:     batchv1.JobStatus{Active: 1},
	}
	if change != nil {
		change(j)
	}
	return j
}

func jobConditions(conditions ...batchv1.JobCondition) func(j *batchv1.Job) {
	return func(j *batchv1.Job) { j.Status.Conditions = conditions }
}

func TestCheckJob(t *testing.T) {
	crash := waiting("CrashLoopBackOff", "back-off 10s restarting failed container")
	tests := []struct {
		name    string
		j       *batchv1.Job
		pods    []*corev1.Pod
		done    bool
		message string
		failed  bool
	}{
		{name: "running", j: job(nil), pods: []*corev1.Pod{owned("migrate-1", "j-uid", nil, nil)}, message: "0 of 1 completions, 1 active"},
		{name: "complete", j: job(func(j *batchv1.Job) {
			jobConditions(batchv1.JobCondition{Type: batchv1.JobComplete, Status: corev1.ConditionTrue})(j)
			j.Status.Succeeded, j.Status.Active = 1, 0
		}), done: true, message: "complete: 1 succeeded"},
		{name: "success criteria met, not complete yet", j: job(jobConditions(batchv1.JobCondition{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionTrue})),
			message: "completions"},
		{name: "backoff limit", j: job(jobConditions(batchv1.JobCondition{Type: batchv1.JobFailed, Status: corev1.ConditionTrue,
			Reason: "BackoffLimitExceeded", Message: "Job has reached the specified backoff limit"})),
			message: "job migrate: BackoffLimitExceeded: Job has reached the specified backoff limit", failed: true},
		{name: "deadline, pods still terminating", j: job(jobConditions(batchv1.JobCondition{Type: batchv1.JobFailureTarget, Status: corev1.ConditionTrue,
			Reason: "DeadlineExceeded", Message: "Job was active longer than specified deadline"})),
			message: "job migrate: DeadlineExceeded", failed: true},
		{name: "a condition that is not true", j: job(jobConditions(batchv1.JobCondition{Type: batchv1.JobFailed, Status: corev1.ConditionFalse})),
			message: "0 of 1 completions"},
		{name: "a crash-looping pod fails it at once", j: job(nil), pods: []*corev1.Pod{owned("migrate-1", "j-uid", nil, crash)},
			message: "job migrate: pod migrate-1, container app: CrashLoopBackOff", failed: true},
		{name: "suspended", j: job(func(j *batchv1.Job) { j.Spec.Suspend = ptr(true) }), done: true, message: "suspended"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assertState(t, CheckJob(tt.j, tt.pods, now, 30*time.Second), tt.done, tt.failed, tt.message)
		})
	}
}

// widget is a custom resource at generation 2 with a status.
func widget(status map[string]any) *unstructured.Unstructured {
	w := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "example.com/v1", "kind": "Widget",
		"metadata": map[string]any{"name": "w", "namespace": "ns", "generation": int64(2)}}}
	if status != nil {
		w.Object["status"] = status
	}
	return w
}

func conditions(observed int64, cs ...map[string]any) map[string]any {
	list := make([]any, 0, len(cs))
	for _, c := range cs {
		list = append(list, c)
	}
	status := map[string]any{"conditions": list}
	if observed != 0 {
		status["observedGeneration"] = observed
	}
	return status
}

func cond(typ, status, reason, message string) map[string]any {
	return map[string]any{"type": typ, "status": status, "reason": reason, "message": message}
}

func TestCheckConditions(t *testing.T) {
	tests := []struct {
		name    string
		obj     *unstructured.Unstructured
		done    bool
		message string
		failed  bool
	}{
		{"no status", widget(nil), true, "no status conditions: not awaited", false},
		{"no conditions", widget(map[string]any{"phase": "Running"}), true, "not awaited", false},
		{"conditions but no Ready", widget(conditions(2, cond("Accepted", "True", "", ""))), true, "no Ready condition", false},
		{"ready", widget(conditions(2, cond("Ready", "True", "Succeeded", "applied"))), true, "ready: Succeeded: applied", false},
		{"ready, of an earlier generation", widget(conditions(1, cond("Ready", "True", "", ""))), false, "generation 2 to be observed", false},
		{"ready, the condition of an earlier generation", widget(conditions(0, map[string]any{"type": "Ready", "status": "True",
			"observedGeneration": int64(1)})), false, "Ready is of 1", false},
		{"not ready", widget(conditions(2, cond("Ready", "False", "InstallFailed", "chart not found"))), false,
			"widget w: InstallFailed: chart not found", true},
		{"not ready while reconciling", widget(conditions(2, cond("Ready", "False", "Progressing", ""),
			cond("Reconciling", "True", "Progressing", "installing"))), false, "reconciling: Progressing: installing", false},
		{"unknown", widget(conditions(2, cond("Ready", "Unknown", "Progressing", "reconciliation in progress"))), false,
			"Ready Unknown: Progressing", false},
		{"stalled", widget(conditions(2, cond("Ready", "Unknown", "", ""), cond("Stalled", "True", "QuotaExceeded", "no room"))), false,
			"widget w: QuotaExceeded: no room", true},
		{"stalled without a reason", widget(conditions(2, cond("Stalled", "True", "", ""))), false, "widget w: Stalled", true},
		{"not stalled", widget(conditions(2, cond("Stalled", "False", "", ""), cond("Ready", "True", "", ""))), true, "ready", false},
		{"conditions unreadable", widget(map[string]any{"conditions": "yes"}), true, "not awaited", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := CheckConditions(tt.obj)
			assertState(t, st, tt.done, tt.failed, tt.message)
			if st.Failure != nil && (st.Failure.Group != "example.com" || st.Failure.Kind != "Widget" || st.Failure.Name != "w") {
				t.Errorf("the failure names %+v, want Widget w of example.com", st.Failure)
			}
		})
	}
}

func TestAwaited(t *testing.T) {
	for gk, want := range map[schema.GroupKind]bool{
		deploymentKind: true, statefulSetKind: true, daemonSetKind: true, jobKind: true,
		{Group: "example.com", Kind: "Widget"}:                 true,
		{Group: "helm.toolkit.fluxcd.io", Kind: "HelmRelease"}: true,
		{Kind: "Service"}:                             false,
		{Kind: "Pod"}:                                 false,
		{Group: "apps", Kind: "ReplicaSet"}:           false,
		{Group: "batch", Kind: "CronJob"}:             false,
		{Group: "networking.k8s.io", Kind: "Ingress"}: false,
		{Group: "apiextensions.k8s.io", Kind: "CustomResourceDefinition"}: false,
	} {
		if got := Awaited(gk); got != want {
			t.Errorf("Awaited(%s) = %v, want %v", gk, got, want)
		}
	}
}
