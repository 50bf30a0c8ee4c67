package rollout

import (
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/toa-deploy/toa-deploy/internal/kinds"
)

// stageCRD is the stage of CustomResourceDefinitions, which must be Established before the
// stages after them are applied.
var stageCRD = kinds.Stage("CustomResourceDefinition")

// stage is the rank of a kind in DESIGN.md's apply order (internal/kinds, the order a render is
// sorted in); unknown kinds rank last, after the CRDs that define them.
func stage(kind string) int { return kinds.Stage(kind) }

// byStage groups objects by stage, in apply order; objects of one stage keep their order.
func byStage(objects []*unstructured.Unstructured) [][]*unstructured.Unstructured {
	out := make([][]*unstructured.Unstructured, kinds.Stages())
	for _, obj := range objects {
		s := stage(obj.GetKind())
		out[s] = append(out[s], obj)
	}
	return out
}
