package rollout

import (
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

// The vector of kubectl's apply_test.go (reference apply-and-wait.md §2.3).
func TestApplySetID(t *testing.T) {
	got := applySetID("my-set", "test", "Secret", "")
	if want := "applyset-0eFHV8ySqp7XoShsGvyWFQD3s96yqwHmzc4e0HR1dsY-v1"; got != want {
		t.Errorf("applySetID(my-set, test, Secret, core) = %s, want %s", got, want)
	}
	s := NewSet("shop", "prod")
	if s.Name != "toa-shop" || s.Namespace != "prod" || s.ID != applySetID("toa-shop", "prod", "Secret", "") {
		t.Errorf("NewSet(shop, prod) = %+v", s)
	}
}

func TestKindsAnnotation(t *testing.T) {
	kinds := []schema.GroupKind{
		{Group: "networking.k8s.io", Kind: "Ingress"}, {Kind: "Service"}, {Group: "apps", Kind: "Deployment"},
		{Kind: "ConfigMap"}, {Group: "apps", Kind: "Deployment"},
	}
	got := kindsAnnotation(kinds)
	if want := "ConfigMap,Deployment.apps,Ingress.networking.k8s.io,Service"; got != want {
		t.Errorf("kindsAnnotation = %q, want %q", got, want)
	}
	if back := kindsAnnotation(parseKinds(got)); back != got {
		t.Errorf("parseKinds does not read back %q: %q", got, back)
	}
	if kindsAnnotation(nil) != "" || len(parseKinds("")) != 0 {
		t.Error("the empty set is not the empty string")
	}
}

func TestNamespacesAnnotation(t *testing.T) {
	got := namespacesAnnotation([]string{"prod", "b", "", "a", "b"}, "prod")
	if got != "a,b" {
		t.Errorf("namespacesAnnotation = %q, want a,b", got)
	}
	if got := namespacesAnnotation([]string{"prod"}, "prod"); got != "" {
		t.Errorf("namespacesAnnotation of the parent's alone = %q, want empty", got)
	}
}

func TestToolingName(t *testing.T) {
	for in, want := range map[string]string{
		"kubectl/v1.35.0": "kubectl", "toa-apply/v0.1.0": "toa-apply", "toa-apply": "toa-apply", "a/b/v1": "a/b",
	} {
		if got := toolingName(in); got != want {
			t.Errorf("toolingName(%q) = %q, want %q", in, got, want)
		}
	}
}
