package rollout

import (
	"context"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// notHeldError is an apply with Options.OnlyOwn refused before anything was applied: objects
// the application does not hold.
type notHeldError struct {
	Set     Set
	Objects []string // each with why: "clusterrolebinding.rbac.authorization.k8s.io/x: cluster-scoped, not the application's"
}

func (e *notHeldError) Error() string {
	return fmt.Sprintf("refused: %d objects are not the application's %s in namespace %s, and a rollback only applies what it holds: %s; "+
		"nothing was applied", len(e.Objects), e.Set.Name, e.Set.Namespace, strings.Join(e.Objects, "; "))
}

// held checks, before anything is applied, that each object is one the set holds or may create
// in its own namespace (Options.OnlyOwn), from the LISTs the apply reads anyway.
func (a *applier) held(ctx context.Context, objects []*unstructured.Unstructured) error {
	targets, err := a.pending(ctx, objects)
	if err != nil {
		return err
	}
	var refused []string
	for _, t := range targets {
		namespace, scoped := t.obj.GetNamespace(), t.mapping.Scope.Name() == meta.RESTScopeNameNamespace
		ref := refOf(t.obj).String()
		switch {
		case t.live == nil && scoped && namespace == a.opts.Namespace:
			// new in the application's own namespace: a rollback may bring it back
		case t.live == nil && !scoped:
			refused = append(refused, ref+": cluster-scoped, and the application holds none of that name")
		case t.live == nil:
			refused = append(refused, fmt.Sprintf("%s: in namespace %s, which is not the application's, and the application holds none of that name there", ref, namespace))
		case !t.live.member:
			refused = append(refused, fmt.Sprintf("%s: exists and is not a member of the application (label %s)", ref, LabelPartOf))
		}
	}
	if len(refused) > 0 {
		return &notHeldError{Set: a.set, Objects: refused}
	}
	return nil
}
