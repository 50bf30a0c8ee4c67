package rollout

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	kube "github.com/toa-deploy/toa-deploy/internal/cluster"
)

var secrets = schema.GroupVersionResource{Version: "v1", Resource: "secrets"}

// parentState is what the parent Secret says the set holds.
type parentState struct {
	exists     bool
	kinds      []schema.GroupKind
	namespaces []string // the parent's and the additional ones
}

// readParent reads the set's parent, refusing one that is not this set's or that another tool
// manages, as kubectl does.
func readParent(ctx context.Context, c *client, set Set) (parentState, error) {
	p, err := c.dyn.Resource(secrets).Namespace(set.Namespace).Get(ctx, set.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return parentState{namespaces: []string{set.Namespace}}, nil
	}
	if err != nil {
		return parentState{}, fmt.Errorf("read the ApplySet parent secret/%s in %s: %w", set.Name, set.Namespace, err)
	}
	where := fmt.Sprintf("secret/%s in namespace %s", set.Name, set.Namespace)
	switch id := p.GetLabels()[labelID]; {
	case id == "":
		return parentState{}, fmt.Errorf("%s exists and is not an ApplySet parent (no label %s): "+
			"toa-apply keeps the application's inventory there; rename or delete that Secret", where, labelID)
	case id != set.ID:
		return parentState{}, fmt.Errorf("%s has the ApplySet id %s, not %s as its name and namespace give: it was not written by toa-apply", where, id, set.ID)
	}
	annotations := p.GetAnnotations()
	if tool := toolingName(annotations[annotationTooling]); tool != Tool {
		return parentState{}, fmt.Errorf("the ApplySet of %s is managed by %q, not %s: toa-apply leaves it alone", where, tool, Tool)
	}
	st := parentState{exists: true, namespaces: append([]string{set.Namespace}, parseNamespaces(annotations[annotationNamespace])...)}
	if kinds, ok := annotations[annotationKinds]; ok {
		st.kinds = parseKinds(kinds)
	} else {
		for _, s := range parseNamespaces(annotations[annotationResources]) {
			gvk, err := c.mapper.KindFor(schema.ParseGroupResource(s).WithVersion(""))
			if err != nil {
				return parentState{}, fmt.Errorf("%s: resource %q of %s: %w", where, s, annotationResources, err)
			}
			st.kinds = append(st.kinds, gvk.GroupKind())
		}
	}
	return st, nil
}

// writeParent server-side applies the parent with the kinds and namespaces the set holds, under
// its own field manager; a conflict over those fields is forced, as kubectl does.
func writeParent(ctx context.Context, c *client, set Set, kinds []schema.GroupKind, namespaces []string, version string) error {
	if version == "" {
		version = "v0.0.0"
	}
	parent := map[string]any{
		"apiVersion": "v1",
		"kind":       "Secret",
		"metadata": map[string]any{
			"name":      set.Name,
			"namespace": set.Namespace,
			"labels":    map[string]string{labelID: set.ID},
			"annotations": map[string]string{
				annotationTooling:   Tool + "/" + version,
				annotationKinds:     kindsAnnotation(kinds),
				annotationNamespace: namespacesAnnotation(namespaces, set.Namespace),
			},
		},
	}
	data, err := json.Marshal(parent)
	if err != nil {
		return err
	}
	ri := c.dyn.Resource(secrets).Namespace(set.Namespace)
	force := false
	_, err = ri.Patch(ctx, set.Name, types.ApplyPatchType, data, metav1.PatchOptions{FieldManager: parentManager, Force: &force})
	if apierrors.IsConflict(err) {
		force = true
		_, err = ri.Patch(ctx, set.Name, types.ApplyPatchType, data, metav1.PatchOptions{FieldManager: parentManager, Force: &force})
	}
	if err != nil {
		return fmt.Errorf("write the ApplySet parent secret/%s in namespace %s: %w", set.Name, set.Namespace, err)
	}
	return nil
}

// Applications are the Toa contexts toa-apply has applied to the namespace: the names of its
// ApplySet parents there, less the "toa-".
func Applications(ctx context.Context, k *kube.Client, namespace string) ([]string, error) {
	list, err := k.Dynamic.Resource(secrets).Namespace(namespace).List(ctx, metav1.ListOptions{LabelSelector: labelID})
	if err != nil {
		return nil, fmt.Errorf("list the applications in namespace %s: %w", namespace, err)
	}
	var out []string
	for _, s := range list.Items {
		name, ok := contextOf(s.GetName())
		if ok && toolingName(s.GetAnnotations()[annotationTooling]) == Tool && s.GetLabels()[labelID] == NewSet(name, namespace).ID {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out, nil
}
