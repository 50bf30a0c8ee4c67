package rollout

import (
	"context"

	kube "github.com/toa-deploy/toa-deploy/cluster"
)

// WaitOn is Wait on the run's client: the same watch loop, without a client of its own.
func WaitOn(ctx context.Context, k *kube.Client, res *Result, opts WaitOptions) error {
	if len(targetsOf(res)) == 0 {
		return nil
	}
	return waitFor(ctx, clientOf(k), res, opts)
}
