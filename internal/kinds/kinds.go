// Package kinds says in which order the kinds of Kubernetes objects are applied (DESIGN.md's
// "Apply and wait"): toa-push writes a kustomization's resources in that order (manifest) and
// toa-apply renders and applies in it (kustomize, rollout). It is on the ground floor, beside
// fault, so that both chains read one order and neither imports the other.
package kinds

import "slices"

// applyOrder lists the kinds of each stage of an apply, in order; kinds not listed form a last
// stage of their own.
var applyOrder = [][]string{
	{"Namespace"},
	{"CustomResourceDefinition"},
	{"ServiceAccount", "Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding"},
	{"ConfigMap", "Secret"},
	{"ResourceQuota", "LimitRange", "NetworkPolicy", "PodDisruptionBudget", "PriorityClass",
		"StorageClass", "PersistentVolume", "PersistentVolumeClaim", "IngressClass"},
	{"Service"},
	{"Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Pod", "Job", "CronJob",
		"HorizontalPodAutoscaler"},
	{"Ingress"},
}

// ApplyOrder is the kinds of each stage of an apply, in order: a copy, the caller's to change.
func ApplyOrder() [][]string {
	out := make([][]string, len(applyOrder))
	for i, kinds := range applyOrder {
		out[i] = slices.Clone(kinds)
	}
	return out
}

// Stages is how many stages an apply has: the listed ones and the last, of the kinds not listed.
func Stages() int { return len(applyOrder) + 1 }

// Stage is the index of a kind's stage in ApplyOrder, len(ApplyOrder()) for kinds not listed.
func Stage(kind string) int {
	if i := slices.IndexFunc(applyOrder, func(kinds []string) bool { return slices.Contains(kinds, kind) }); i >= 0 {
		return i
	}
	return len(applyOrder)
}
