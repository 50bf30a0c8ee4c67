package rollout

import (
	"encoding/json"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestHelmRelease(t *testing.T) {
	obj := object("apps/v1", "Deployment", "composition-a", map[string]any{helmManagedByLabel: "Helm"})
	obj.SetNamespace("prod")
	obj.SetAnnotations(map[string]string{helmNameAnnotation: "shop"})
	r, ok := helmRelease(obj)
	if !ok || r.Name != "shop" || r.Namespace != "prod" {
		t.Errorf("helmRelease = %+v, %v; want shop in prod", r, ok)
	}
	obj.SetAnnotations(map[string]string{helmNameAnnotation: "shop", helmNamespaceAnnotation: "releases"})
	if r, _ := helmRelease(obj); r.Namespace != "releases" {
		t.Errorf("helmRelease namespace = %s, want releases", r.Namespace)
	}
	if _, ok := helmRelease(object("v1", "Service", "s", map[string]any{helmManagedByLabel: "kapp"})); ok {
		t.Error("an object another tool manages is Helm's")
	}
	if _, ok := helmRelease(nil); ok {
		t.Error("no object is Helm's")
	}
}

func fieldsV1(s string) *metav1.FieldsV1 { return metav1.NewFieldsV1(s) }

// The patch moves Helm's fields, client-side (Update) or Helm 4's server-side (Apply), to one toa
// Apply entry, and leaves the controller's status and other managers alone.
func TestAdoptionPatch(t *testing.T) {
	live := object("apps/v1", "Deployment", "composition-a", nil)
	live.SetResourceVersion("42")
	live.SetManagedFields([]metav1.ManagedFieldsEntry{
		{Manager: "helm", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "apps/v1", FieldsType: "FieldsV1",
			FieldsV1: fieldsV1(`{"f:metadata":{"f:labels":{"f:app.kubernetes.io/managed-by":{}}},"f:spec":{"f:replicas":{}}}`)},
		{Manager: "kubectl-client-side-apply", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "apps/v1", FieldsType: "FieldsV1",
			FieldsV1: fieldsV1(`{"f:metadata":{"f:annotations":{"f:legacy":{}}}}`)},
		{Manager: "kube-controller-manager", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "apps/v1", Subresource: "status",
			FieldsType: "FieldsV1", FieldsV1: fieldsV1(`{"f:status":{"f:replicas":{}}}`)},
		{Manager: "hpa-tuner", Operation: metav1.ManagedFieldsOperationApply, APIVersion: "apps/v1", FieldsType: "FieldsV1",
			FieldsV1: fieldsV1(`{"f:spec":{"f:minReadySeconds":{}}}`)},
	})
	patch, managers, err := adoptionPatch(live)
	if err != nil || patch == nil {
		t.Fatalf("adoptionPatch = %s, %v", patch, err)
	}
	if managers.Len() != 2 || !managers.Has("helm") || !managers.Has("kubectl-client-side-apply") {
		t.Errorf("managers = %v", managers)
	}
	var ops []struct {
		Op    string          `json:"op"`
		Path  string          `json:"path"`
		Value json.RawMessage `json:"value"`
	}
	if err := json.Unmarshal(patch, &ops); err != nil {
		t.Fatal(err)
	}
	var entries []metav1.ManagedFieldsEntry
	for _, op := range ops {
		switch op.Path {
		case "/metadata/resourceVersion":
			if string(op.Value) != `"42"` {
				t.Errorf("the patch is not conditional on the resourceVersion read: %s", op.Value)
			}
		case "/metadata/managedFields":
			if err := json.Unmarshal(op.Value, &entries); err != nil {
				t.Fatal(err)
			}
		}
	}
	byManager := map[string]metav1.ManagedFieldsEntry{}
	for _, e := range entries {
		byManager[e.Manager] = e
	}
	toa, ok := byManager[FieldManager]
	if !ok || toa.Operation != metav1.ManagedFieldsOperationApply || len(entries) != 3 {
		t.Fatalf("managed fields after the patch: %+v", entries)
	}
	raw := toa.FieldsV1.GetRawString()
	for _, field := range []string{`"f:app.kubernetes.io/managed-by"`, `"f:replicas"`, `"f:legacy"`} {
		if !strings.Contains(raw, field) {
			t.Errorf("toa's fields %s lack %s", raw, field)
		}
	}
	if _, ok := byManager["kube-controller-manager"]; !ok {
		t.Error("the controller's status entry was dropped")
	}
	if e, ok := byManager["hpa-tuner"]; !ok || e.Operation != metav1.ManagedFieldsOperationApply {
		t.Error("another manager's entry was changed")
	}

	// Helm 4's server-side entries move too
	live.SetManagedFields([]metav1.ManagedFieldsEntry{{Manager: "helm", Operation: metav1.ManagedFieldsOperationApply,
		APIVersion: "apps/v1", FieldsType: "FieldsV1", FieldsV1: fieldsV1(`{"f:spec":{"f:replicas":{}}}`)}})
	if patch, _, err := adoptionPatch(live); err != nil || patch == nil {
		t.Errorf("adoptionPatch of Helm 4's Apply entry = %s, %v", patch, err)
	}
	// and nothing to move is no patch
	live.SetManagedFields([]metav1.ManagedFieldsEntry{{Manager: "toa", Operation: metav1.ManagedFieldsOperationApply,
		APIVersion: "apps/v1", FieldsType: "FieldsV1", FieldsV1: fieldsV1(`{"f:spec":{"f:replicas":{}}}`)}})
	if patch, _, err := adoptionPatch(live); err != nil || patch != nil {
		t.Errorf("adoptionPatch with no Helm manager = %s, %v", patch, err)
	}
}
