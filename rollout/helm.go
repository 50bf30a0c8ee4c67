package rollout

import (
	"context"
	"fmt"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/util/csaupgrade"
)

// What Helm writes on the objects of a release, and on the Secrets that hold the release.
const (
	helmManagedByLabel      = "app.kubernetes.io/managed-by"
	helmNameAnnotation      = "meta.helm.sh/release-name"
	helmNamespaceAnnotation = "meta.helm.sh/release-namespace"
	helmReleaseType         = "helm.sh/release.v1"
)

// helmRelease is the release that made obj, when Helm did.
func helmRelease(obj *unstructured.Unstructured) (*HelmRelease, bool) {
	if obj == nil {
		return nil, false
	}
	a := obj.GetAnnotations()
	name := a[helmNameAnnotation]
	if name == "" && obj.GetLabels()[helmManagedByLabel] != "Helm" {
		return nil, false
	}
	ns := a[helmNamespaceAnnotation]
	if ns == "" {
		ns = obj.GetNamespace()
	}
	return &HelmRelease{Name: name, Namespace: ns}, true
}

// helmManagers are the managers whose fields an adopted object's Helm past left: Helm 3's
// client-side "helm" (os.Args[0], so "helm" or a variant of it), Helm 4's server-side "helm",
// and kubectl's client-side apply.
func helmManagers(entries []metav1.ManagedFieldsEntry) sets.Set[string] {
	out := sets.New[string]()
	for _, e := range entries {
		if e.Subresource == "" && (strings.HasPrefix(e.Manager, "helm") || e.Manager == "kubectl-client-side-apply") {
			out.Insert(e.Manager)
		}
	}
	return out
}

// adopt moves the fields Helm's managers own on live to toa, with one JSON patch on
// metadata.managedFields (client-go's csaupgrade, as kubectl and Helm 4 do for their own client-side
// managers). The apply that follows then owns every field Helm set, so the fields and the Helm
// labels and annotations the manifests no longer have are removed, and nothing conflicts with
// Helm. The patch carries the resourceVersion read: a change in between is read again.
func adopt(ctx context.Context, ri dynamic.ResourceInterface, live *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	for attempt := 0; ; attempt++ {
		patch, managers, err := adoptionPatch(live)
		if err != nil || patch == nil {
			return live, err
		}
		out, err := ri.Patch(ctx, live.GetName(), types.JSONPatchType, patch, metav1.PatchOptions{})
		if apierrors.IsConflict(err) && attempt < 5 {
			if live, err = ri.Get(ctx, live.GetName(), metav1.GetOptions{}); err != nil {
				return nil, err
			}
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("move the fields of %s to %s: %w", strings.Join(sets.List(managers), ", "), FieldManager, err)
		}
		return out, nil
	}
}

// adoptionPatch is the JSON patch that gives the fields of live's Helm managers to toa, nil when
// there are none.
func adoptionPatch(live *unstructured.Unstructured) ([]byte, sets.Set[string], error) {
	managers := helmManagers(live.GetManagedFields())
	if managers.Len() == 0 {
		return nil, managers, nil
	}
	obj := live.DeepCopy()
	// csaupgrade merges Update entries; Helm 4's are Apply entries: merge them the same way
	entries := obj.GetManagedFields()
	for i := range entries {
		if managers.Has(entries[i].Manager) {
			entries[i].Operation = metav1.ManagedFieldsOperationUpdate
		}
	}
	obj.SetManagedFields(entries)
	patch, err := csaupgrade.UpgradeManagedFieldsPatch(obj, managers, FieldManager)
	return patch, managers, err
}

// reportReleases lists the Secrets of the releases objects were adopted from.
func (a *applier) reportReleases(ctx context.Context) error {
	for _, r := range a.releases {
		if r.Name != "" {
			list, err := a.c.dyn.Resource(secrets).Namespace(r.Namespace).List(ctx, metav1.ListOptions{
				LabelSelector: "owner=helm,name=" + r.Name})
			if err != nil {
				return fmt.Errorf("list the Secrets of Helm release %s in %s: %w", r.Name, r.Namespace, err)
			}
			for _, s := range list.Items {
				if t, _, _ := unstructured.NestedString(s.Object, "type"); t == helmReleaseType {
					r.Secrets = append(r.Secrets, s.GetName())
				}
			}
			slices.Sort(r.Secrets)
		}
		a.res.Helm = append(a.res.Helm, *r)
	}
	slices.SortFunc(a.res.Helm, func(x, y HelmRelease) int {
		return strings.Compare(x.Namespace+"/"+x.Name, y.Namespace+"/"+y.Name)
	})
	return nil
}
