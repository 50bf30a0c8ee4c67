package rollout

import (
	"context"
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// NotHeldError is an apply with Options.OnlyOwn refused before anything was applied: objects
// the application does not hold.
type NotHeldError struct {
	Set     Set
	Objects []string // each with why: "clusterrolebinding.rbac.authorization.k8s.io/x: cluster-scoped, not the application's"
}

func (e *NotHeldError) Error() string {
	return fmt.Sprintf("refused: %d objects are not the application's %s in namespace %s, and a rollback only applies what it holds: %s; "+
		"nothing was applied", len(e.Objects), e.Set.Name, e.Set.Namespace, strings.Join(e.Objects, "; "))
}

// held checks, before anything is applied, that each object is one the set holds or may create
// in its own namespace (Options.OnlyOwn).
func (a *applier) held(ctx context.Context, objects []*unstructured.Unstructured) error {
	var refused []string
	for _, obj := range objects {
		m, err := a.c.mapping(obj.GroupVersionKind())
		if err != nil {
			return err
		}
		namespace, scoped := obj.GetNamespace(), m.Scope.Name() == meta.RESTScopeNameNamespace
		if scoped && namespace == "" {
			namespace = a.opts.Namespace
		}
		if !scoped {
			namespace = ""
		}
		ref := RefOf(obj).String()
		live, err := a.c.resource(m, namespace).Get(ctx, obj.GetName(), metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err) && scoped && namespace == a.opts.Namespace:
			// new in the application's own namespace: a rollback may bring it back
		case apierrors.IsNotFound(err) && !scoped:
			refused = append(refused, ref+": cluster-scoped, and the application holds none of that name")
		case apierrors.IsNotFound(err):
			refused = append(refused, fmt.Sprintf("%s: in namespace %s, which is not the application's, and the application holds none of that name there", ref, namespace))
		case err != nil:
			return fmt.Errorf("get %s: %w", ref, err)
		case live.GetLabels()[LabelPartOf] != a.set.ID:
			refused = append(refused, fmt.Sprintf("%s: exists and is not a member of the application (label %s)", ref, LabelPartOf))
		}
	}
	if len(refused) > 0 {
		return &NotHeldError{Set: a.set, Objects: refused}
	}
	return nil
}
