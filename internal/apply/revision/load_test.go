package revision

import (
	"context"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/toa-deploy/toa-deploy/internal/cluster"
	"github.com/toa-deploy/toa-deploy/rollout"
)

// Load reads revision n of the set (see Pick), verified and decoded within bounds, as
// release.Release.Revision does through its Steps.
func Load(ctx context.Context, k *cluster.Client, set rollout.Set, n int) (Revision, []*unstructured.Unstructured, error) {
	h, err := Read(ctx, k, set)
	if err != nil {
		return Revision{}, nil, err
	}
	rev, err := h.Pick(set, n)
	if err != nil {
		return Revision{}, nil, err
	}
	objects, err := rev.Decode()
	return rev, objects, err
}
