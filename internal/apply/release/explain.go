package release

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/toa-deploy/toa-deploy/internal/cluster"
	"github.com/toa-deploy/toa-deploy/internal/fault"
	"github.com/toa-deploy/toa-deploy/rollout"
	"github.com/toa-deploy/toa-deploy/rollout/status"
)

// Explainer gives the errors of a run the words and fault classes of DESIGN.md's exit codes:
// what to check when the server refuses the credentials, what was awaited when the time ran
// out, why the pods of a failed rollout are not ready.
type Explainer struct {
	Credentials string        // whose credentials these are (cluster.Target.Credentials)
	Timeout     time.Duration // --timeout
}

// Explain is err with its hint and class; nil for nil.
func (x Explainer) Explain(err error) error {
	var input *fault.Input
	var awaiting *rollout.Awaiting
	var failure *status.Failure
	var noAnswer *cluster.NoAnswer
	var held *HeldError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &input), errors.As(err, &held):
		return err
	case apierrors.IsUnauthorized(err):
		return fmt.Errorf("%w\n  the API server did not accept %s: check its token or client certificate "+
			"(it may have expired; an exec or auth-provider plugin may need a new login); "+
			"`kubectl auth whoami` with the same kubeconfig and context shows what the server sees", err, x.Credentials)
	case apierrors.IsForbidden(err):
		return fmt.Errorf("%w\n  the API server knows %s but does not allow this: check the Roles and "+
			"RoleBindings of that user in the namespace (toa-apply needs get, list, watch, patch and delete "+
			"on the application's kinds, and on Secrets for its inventory; get, create, update and delete on leases for its lock); `kubectl auth can-i --list -n NAMESPACE` shows what it may do", err, x.Credentials)
	case errors.As(err, &noAnswer):
		return fault.TimedOut(err)
	case errors.As(err, &awaiting):
		var pods []status.PodReport
		for _, s := range awaiting.Objects {
			pods = append(pods, s.Pods...)
		}
		return fault.TimedOut(fmt.Errorf("%w (--timeout %s)%s", err, x.Timeout, Explanation(pods)))
	case errors.Is(err, context.DeadlineExceeded):
		return fault.TimedOut(fmt.Errorf("--timeout %s passed before the apply finished: %w", x.Timeout, err))
	case errors.As(err, &failure):
		return fmt.Errorf("rollout failed: %w%s", err, Explanation(failure.Pods))
	}
	return err
}

// Explanation is the text of pod reports under an error, "" for none.
func Explanation(pods []status.PodReport) string {
	if len(pods) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteByte('\n')
	status.WritePods(&b, pods, time.Now())
	return strings.TrimRight(b.String(), "\n")
}
