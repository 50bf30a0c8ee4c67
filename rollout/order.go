package rollout

import (
	"slices"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// stages is DESIGN.md's apply order: Namespaces and CRDs (established before anything else),
// then ServiceAccounts, RBAC, ConfigMaps and Secrets, then what workloads need besides, then
// Services, then workloads, then Ingress. Kinds not named go last, after the CRDs that define
// them.
var stages = [][]string{
	{"Namespace"},
	{"CustomResourceDefinition"},
	{"ServiceAccount", "Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding", "ConfigMap", "Secret"},
	{"ResourceQuota", "LimitRange", "NetworkPolicy", "PodDisruptionBudget", "PriorityClass",
		"StorageClass", "PersistentVolume", "PersistentVolumeClaim", "IngressClass"},
	{"Service"},
	{"Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Pod", "Job", "CronJob",
		"HorizontalPodAutoscaler"},
	{"Ingress"},
}

const stageCRD = 1

// stage is the rank of a kind in stages; unknown kinds rank last.
func stage(kind string) int {
	for i, kinds := range stages {
		if slices.Contains(kinds, kind) {
			return i
		}
	}
	return len(stages)
}

// byStage groups objects by stage, in apply order; objects of one stage keep their order.
func byStage(objects []*unstructured.Unstructured) [][]*unstructured.Unstructured {
	out := make([][]*unstructured.Unstructured, len(stages)+1)
	for _, obj := range objects {
		s := stage(obj.GetKind())
		out[s] = append(out[s], obj)
	}
	return out
}
