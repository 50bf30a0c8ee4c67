package rollout

import (
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Ref names an object.
type Ref struct {
	Group     string `json:"group,omitempty"`
	Version   string `json:"version"`
	Kind      string `json:"kind"`
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name"`
}

// refOf is the Ref of an object.
func refOf(obj *unstructured.Unstructured) Ref {
	gvk := obj.GroupVersionKind()
	return Ref{Group: gvk.Group, Version: gvk.Version, Kind: gvk.Kind, Namespace: obj.GetNamespace(), Name: obj.GetName()}
}

// String is the name kubectl prints: deployment.apps/composition-a.
func (r Ref) String() string {
	kind := strings.ToLower(r.Kind)
	if r.Group != "" {
		kind += "." + r.Group
	}
	return kind + "/" + r.Name
}

// GroupKind of the object.
func (r Ref) GroupKind() schema.GroupKind { return schema.GroupKind{Group: r.Group, Kind: r.Kind} }

// key identifies the object whatever version it is served in.
func (r Ref) key() string { return r.Group + "/" + r.Kind + "/" + r.Namespace + "/" + r.Name }

// Change is what an apply did, or with a dry run would do, to an object.
type Change string

// Changes.
const (
	Created    Change = "created"
	Configured Change = "configured"
	Unchanged  Change = "unchanged"
)

// Applied is an object as the API server returned it from the apply, and what the apply changed.
type Applied struct {
	Ref
	Change Change                     `json:"change"`
	Object *unstructured.Unstructured `json:"-"`
	Live   *unstructured.Unstructured `json:"-"` // as it was before, nil when created
}

// HelmRelease is a release of the Node tool's Helm whose objects were adopted, with the Secrets
// in which Helm keeps it: `helm uninstall` would read them and delete the adopted objects.
type HelmRelease struct {
	Name      string   `json:"name"`
	Namespace string   `json:"namespace"`
	Secrets   []string `json:"secrets"`
}

// Result is what Apply or Delete did, or with a dry run would do.
type Result struct {
	Set     Set       `json:"applyset"`
	DryRun  bool      `json:"dryRun,omitempty"`
	Applied []Applied `json:"applied,omitempty"`
	// NotApplied are the objects an apply that stopped part-way did not reach: the cluster has
	// the application partly applied, and nothing was pruned.
	NotApplied []Ref         `json:"notApplied,omitempty"`
	Pruned     []Ref         `json:"pruned,omitempty"`  // deleted as no longer in the application
	Deleted    []Ref         `json:"deleted,omitempty"` // deleted by Delete
	Adopted    []Ref         `json:"adopted,omitempty"` // taken over from a Helm release
	Helm       []HelmRelease `json:"helmReleases,omitempty"`

	// PrunedObjects are the pruned objects as they were, in Pruned's order: what a diff shows.
	PrunedObjects []*unstructured.Unstructured `json:"-"`
}
