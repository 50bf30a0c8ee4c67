package rollout

import (
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/toa-deploy/toa-deploy/kustomize"
)

// stageCRD is the stage of CustomResourceDefinitions, which must be Established before the
// stages after them are applied.
var stageCRD = kustomize.Stage("CustomResourceDefinition")

// stage is the rank of a kind in DESIGN.md's apply order (kustomize.ApplyOrder, the order a
// render is sorted in); unknown kinds rank last, after the CRDs that define them.
func stage(kind string) int { return kustomize.Stage(kind) }

// byStage groups objects by stage, in apply order; objects of one stage keep their order.
func byStage(objects []*unstructured.Unstructured) [][]*unstructured.Unstructured {
	out := make([][]*unstructured.Unstructured, len(kustomize.ApplyOrder)+1)
	for _, obj := range objects {
		s := stage(obj.GetKind())
		out[s] = append(out[s], obj)
	}
	return out
}
