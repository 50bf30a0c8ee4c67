package rollout

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kube "github.com/toa-deploy/toa-deploy/internal/cluster"
)

// TerminatingError is a namespace being deleted: nothing can be created in it, so nothing of an
// apply is begun there.
type TerminatingError struct {
	Namespace string
	Since     metav1.Time
}

func (e *TerminatingError) Error() string {
	since := ""
	if !e.Since.IsZero() {
		since = " since " + e.Since.UTC().Format("2006-01-02 15:04:05 UTC")
	}
	return fmt.Sprintf("namespace %s is being deleted (phase Terminating%s): nothing was applied; "+
		"wait until it is gone and apply again, or apply to another namespace", e.Namespace, since)
}

// CheckNamespaces refuses, before an apply, a namespace the objects go to that is being deleted.
// A namespace that does not exist yet is fine (the application may create it), and so is one
// the credentials may not read: many deployers may not get namespaces.
func CheckNamespaces(ctx context.Context, k *kube.Client, namespaces ...string) error {
	for _, name := range uniq(namespaces) {
		if name == "" {
			continue
		}
		ns, err := k.Typed.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err), apierrors.IsForbidden(err):
			continue
		case err != nil:
			return fmt.Errorf("read namespace %s: %w", name, err)
		case ns.Status.Phase == corev1.NamespaceTerminating || ns.DeletionTimestamp != nil:
			e := &TerminatingError{Namespace: name}
			if ns.DeletionTimestamp != nil {
				e.Since = *ns.DeletionTimestamp
			}
			return e
		}
	}
	return nil
}
