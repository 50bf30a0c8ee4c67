package rollout

import (
	"context"
	"errors"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	clienttesting "k8s.io/client-go/testing"

	"github.com/toa-deploy/toa-deploy/internal/cluster/clustertest"
	"github.com/toa-deploy/toa-deploy/internal/fault"
)

func object(apiVersion, kind, name string, labels map[string]any) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": apiVersion, "kind": kind,
		"metadata": map[string]any{"name": name, "labels": labels},
	}}
}

func TestContextName(t *testing.T) {
	shop := map[string]any{LabelContext: "shop"}
	tests := []struct {
		name    string
		objects []*unstructured.Unstructured
		want    string
		err     string
	}{
		{"one context", []*unstructured.Unstructured{object("v1", "Service", "a", shop), object("apps/v1", "Deployment", "a", shop)}, "shop", ""},
		{"none", nil, "", "no objects"},
		{"two", []*unstructured.Unstructured{object("v1", "Service", "a", shop), object("v1", "Service", "b", map[string]any{LabelContext: "blog"})}, "", `"shop" and "blog"`},
		{"missing", []*unstructured.Unstructured{object("v1", "Service", "a", shop), object("v1", "ConfigMap", "extra", nil)}, "", "configmap/extra lack the label toa/context"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := contextName(tt.objects)
			var input *fault.Input
			switch {
			case tt.err == "" && (err != nil || got != tt.want):
				t.Errorf("contextName = %q, %v; want %q", got, err, tt.want)
			case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err) || !errors.As(err, &input)):
				t.Errorf("contextName error = %v, want an InputError saying %q", err, tt.err)
			}
		})
	}
}

func TestMembers(t *testing.T) {
	in := object("v1", "Service", "a", map[string]any{LabelContext: "shop"})
	set := NewSet("shop", "prod")
	out := members([]*unstructured.Unstructured{in}, set)
	if out[0].GetLabels()[LabelPartOf] != set.ID {
		t.Errorf("a member lacks the part-of label: %v", out[0].GetLabels())
	}
	if _, ok := in.GetLabels()[LabelPartOf]; ok {
		t.Error("members changed the objects given")
	}
}

func TestByStage(t *testing.T) {
	var objects []*unstructured.Unstructured
	for _, kind := range []string{"Ingress", "Widget", "Deployment", "Service", "Secret", "ServiceAccount", "CustomResourceDefinition", "Namespace", "ConfigMap"} {
		objects = append(objects, object("v1", kind, strings.ToLower(kind), nil))
	}
	var got []string
	for _, objs := range byStage(objects) {
		for _, o := range objs {
			got = append(got, o.GetKind())
		}
	}
	// ServiceAccounts and RBAC before ConfigMaps and Secrets, as kustomize.Sort renders them
	want := "Namespace CustomResourceDefinition ServiceAccount Secret ConfigMap Service Deployment Ingress Widget"
	if strings.Join(got, " ") != want {
		t.Errorf("apply order = %v, want %s", got, want)
	}
}

func TestChangeOf(t *testing.T) {
	live := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": "c", "resourceVersion": "1", "generation": int64(1),
			"managedFields": []any{map[string]any{"manager": "toa"}}},
		"data": map[string]any{"a": "1"},
	}}
	same := live.DeepCopy()
	same.SetResourceVersion("2")
	same.SetGeneration(2)
	same.Object["status"] = map[string]any{"x": "y"}
	changed := same.DeepCopy()
	changed.Object["data"] = map[string]any{"a": "2"}
	if c := changeOf(nil, live); c != Created {
		t.Errorf("changeOf(nil) = %s", c)
	}
	if c := changeOf(live, same); c != Unchanged {
		t.Errorf("changeOf(bookkeeping only) = %s", c)
	}
	if c := changeOf(live, changed); c != Configured {
		t.Errorf("changeOf(data) = %s", c)
	}
}

// An object adopted from a Helm release whose apply is then refused is reported adopted, and
// the refusal is the error (before, the adopted object's result was read from the apply that
// did not happen).
func TestAdoptedThenRefused(t *testing.T) {
	ctx := context.Background()
	helmMade := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": "c", "namespace": "ns",
			"labels":      map[string]any{helmManagedByLabel: "Helm"},
			"annotations": map[string]any{helmNameAnnotation: "shop", helmNamespaceAnnotation: "ns"}}}}
	k := clustertest.New(helmMade)
	k.Dynamic.(*dynamicfake.FakeDynamicClient).PrependReactor("patch", "configmaps", func(action clienttesting.Action) (bool, runtime.Object, error) {
		if pa, ok := action.(clienttesting.PatchActionImpl); ok && pa.GetPatchType() == types.ApplyPatchType {
			return true, nil, apierrors.NewInvalid(schema.GroupKind{Kind: "ConfigMap"}, "c", nil)
		}
		return false, nil, nil
	})
	res, err := Apply(ctx, k, []*unstructured.Unstructured{object("v1", "ConfigMap", "c", map[string]any{LabelContext: "shop"})},
		Options{Namespace: "ns", Prune: true})
	var input *fault.Input
	if !errors.As(err, &input) || !strings.Contains(err.Error(), "apply configmap/c") {
		t.Fatalf("Apply = %v, want the refusal as bad input", err)
	}
	if len(res.Adopted) != 1 || res.Adopted[0].Name != "c" || len(res.Applied) != 0 {
		t.Errorf("adopted %v, applied %v; want c adopted and nothing applied", res.Adopted, res.Applied)
	}
}
