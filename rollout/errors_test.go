package rollout

import (
	"context"
	"errors"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/toa-deploy/toa-deploy/internal/fault"
)

// The Status the API server returns for a conflicting server-side apply
// (apimachinery pkg/util/managedfields/internal/conflict.go).
func TestConflicts(t *testing.T) {
	err := apierrors.NewApplyConflict([]metav1.StatusCause{
		{Type: metav1.CauseTypeFieldManagerConflict, Message: `conflict with "hpa-tuner" using apps/v1 at 2026-08-01T12:00:00Z`, Field: ".spec.replicas"},
		{Type: metav1.CauseTypeFieldManagerConflict, Message: `conflict with "kubectl-edit"`, Field: `.metadata.labels.tier`},
	}, "Apply failed with 2 conflicts")
	got := conflicts(err)
	want := []Conflict{{"hpa-tuner", ".spec.replicas"}, {"kubectl-edit", ".metadata.labels.tier"}}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("conflicts = %v, want %v", got, want)
	}
	msg := (&ConflictError{Object: Ref{Group: "apps", Version: "v1", Kind: "Deployment", Name: "composition-a"}, Conflicts: got}).Error()
	for _, part := range []string{"deployment.apps/composition-a", `"hpa-tuner", "kubectl-edit"`, ".spec.replicas", ".metadata.labels.tier", "--force-conflicts"} {
		if !strings.Contains(msg, part) {
			t.Errorf("the conflict error %q does not say %q", msg, part)
		}
	}
	if conflicts(apierrors.NewNotFound(schema.GroupResource{Resource: "pods"}, "p")) != nil {
		t.Error("a NotFound has conflicts")
	}
}

func TestAwaiting(t *testing.T) {
	err := fault.TimedOut(&Awaiting{Objects: []Status{{Name: "composition-a", Message: "2 old pods terminating: a-1, a-2"}}})
	if !errors.Is(err, context.DeadlineExceeded) || fault.ClassOf(err) != fault.ClassTimeout {
		t.Error("a wait's timeout is not a timeout")
	}
	var a *Awaiting
	if !errors.As(err, &a) || len(a.Objects) != 1 {
		t.Errorf("errors.As(%v, *Awaiting) = %v", err, a)
	}
	if want := "timed out waiting for deployment composition-a: 2 old pods terminating: a-1, a-2"; err.Error() != want {
		t.Errorf("the timeout says %q, want %q", err.Error(), want)
	}
}
