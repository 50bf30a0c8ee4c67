package rollout

// The objects the wait's tests watch: the fixtures of status's tests, which judge them.

import (
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
)

func ptr[T any](v T) *T { return &v }

// deployment is a Deployment of 3 replicas at generation 2, rolled out, revision 2, with d's
// changes.
func deployment(change func(d *appsv1.Deployment)) *appsv1.Deployment {
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "composition-a", Namespace: "ns", UID: "d-uid", Generation: 2,
			Annotations: map[string]string{"deployment.kubernetes.io/revision": "2"}},
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

var now = time.Date(2026, 8, 1, 12, 0, 0, 0, time.UTC)

func pod(name, hash string, change func(p *corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", Labels: map[string]string{appsv1.DefaultDeploymentUniqueLabelKey: hash},
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

func replicaSet(name, hash, revision string, owner types.UID) *appsv1.ReplicaSet {
	return &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns",
		Labels:          map[string]string{appsv1.DefaultDeploymentUniqueLabelKey: hash},
		Annotations:     map[string]string{"deployment.kubernetes.io/revision": revision},
		OwnerReferences: []metav1.OwnerReference{{Kind: "Deployment", Name: "composition-a", UID: owner, Controller: ptr(true)}}}}
}

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
