package rollout

import (
	"context"
	"errors"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/toa-deploy/toa-deploy/internal/cluster/clustertest"
)

// A rollback (OnlyOwn) refuses, before it applies anything, a cluster-scoped object or one in
// another namespace the application does not hold, and an object that exists and is not its own.
func TestOnlyOwn(t *testing.T) {
	ctx := context.Background()
	labels := map[string]any{LabelContext: "shop"}
	cm := func(namespace, name string, l map[string]any) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
			"metadata": map[string]any{"name": name, "namespace": namespace, "labels": l}}}
	}
	foreign := cm("ns", "foreign", nil)
	k := clustertest.New(foreign)
	opts := Options{Namespace: "ns", Prune: true}
	if _, err := Apply(ctx, k, []*unstructured.Unstructured{cm("", "own", labels)}, opts); err != nil {
		t.Fatal(err)
	}
	admin := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
		"metadata": map[string]any{"name": "toa-admin", "labels": labels},
		"roleRef":  map[string]any{"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"}}}
	tests := []struct {
		name    string
		objects []*unstructured.Unstructured
		refused string
	}{
		{"its own and a new one in its namespace", []*unstructured.Unstructured{cm("", "own", labels), cm("", "new", labels)}, ""},
		{"a cluster-scoped object", []*unstructured.Unstructured{cm("", "new", labels), admin}, "clusterrolebinding.rbac.authorization.k8s.io/toa-admin: cluster-scoped"},
		{"another namespace", []*unstructured.Unstructured{cm("", "new", labels), cm("kube-system", "x", labels)}, "configmap/x: in namespace kube-system"},
		{"a foreign object", []*unstructured.Unstructured{cm("", "new", labels), cm("", "foreign", labels)}, "configmap/foreign: exists and is not a member"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := opts
			o.OnlyOwn, o.DryRun = true, tt.refused == ""
			_, err := Apply(ctx, k, tt.objects, o)
			var refused *notHeldError
			if tt.refused == "" {
				if err != nil {
					t.Errorf("refused: %v", err)
				}
				return
			}
			if !errors.As(err, &refused) || !strings.Contains(err.Error(), tt.refused) || !strings.Contains(err.Error(), "nothing was applied") {
				t.Errorf("%v, want %q", err, tt.refused)
			}
			configMaps := k.Dynamic.Resource(schema.GroupVersionResource{Version: "v1", Resource: "configmaps"})
			if _, err := configMaps.Namespace("ns").Get(ctx, "new", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				t.Errorf("configmap/new after a refusal: %v, want none", err)
			}
			if live, _ := configMaps.Namespace("ns").Get(ctx, "foreign", metav1.GetOptions{}); live.GetLabels()[LabelPartOf] != "" {
				t.Errorf("the foreign object was adopted: %v", live.GetLabels())
			}
		})
	}
}
