package rollout

import (
	"context"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	clienttesting "k8s.io/client-go/testing"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
)

// fakeMapper is a REST mapper of the kinds the hermetic tests use.
type fakeMapper struct{ *meta.DefaultRESTMapper }

func (fakeMapper) Reset() {}

// fakeClient is client-go's fake dynamic client (and clientset) behind a client: hermetic
// tests of apply, prune, delete and revisions. It has no server-side apply semantics beyond
// create-or-merge, no admission and no garbage collector: the real control plane's tests cover
// those.
func fakeClient(t *testing.T, objects ...runtime.Object) *client {
	t.Helper()
	kinds := map[schema.GroupVersionResource]string{
		{Version: "v1", Resource: "secrets"}:                    "SecretList",
		{Version: "v1", Resource: "services"}:                   "ServiceList",
		{Version: "v1", Resource: "configmaps"}:                 "ConfigMapList",
		{Group: "apps", Version: "v1", Resource: "deployments"}: "DeploymentList",
	}
	m := meta.NewDefaultRESTMapper([]schema.GroupVersion{{Version: "v1"}, {Group: "apps", Version: "v1"}})
	for gvr, list := range kinds {
		m.Add(gvr.GroupVersion().WithKind(list[:len(list)-4]), meta.RESTScopeNamespace)
	}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), kinds, objects...)
	// the fake cannot server-side apply unstructured objects: one manager's apply of a whole
	// object, as ours are, replaces what it applied before
	dyn.PrependReactor("patch", "*", func(action clienttesting.Action) (bool, runtime.Object, error) {
		pa, ok := action.(clienttesting.PatchActionImpl)
		if !ok || pa.GetPatchType() != types.ApplyPatchType {
			return false, nil, nil
		}
		obj := &unstructured.Unstructured{}
		if err := obj.UnmarshalJSON(pa.GetPatch()); err != nil {
			return true, nil, err
		}
		obj.SetNamespace(pa.GetNamespace())
		live, err := dyn.Tracker().Get(pa.GetResource(), pa.GetNamespace(), pa.GetName())
		switch {
		case apierrors.IsNotFound(err):
			if len(pa.PatchOptions.DryRun) == 0 {
				err = dyn.Tracker().Create(pa.GetResource(), obj, pa.GetNamespace())
			} else {
				err = nil
			}
			return true, obj, err
		case err != nil:
			return true, nil, err
		}
		old := live.(*unstructured.Unstructured)
		obj.SetUID(old.GetUID())
		obj.SetOwnerReferences(old.GetOwnerReferences())
		if len(pa.PatchOptions.DryRun) == 0 {
			err = dyn.Tracker().Update(pa.GetResource(), obj, pa.GetNamespace())
		}
		return true, obj, err
	})
	return &client{dyn: dyn, cs: fake.NewClientset(), mapper: fakeMapper{m}}
}

func configMap(name string, data map[string]any) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": name, "labels": map[string]any{LabelContext: "shop"}}, "data": data}}
}

var bg = context.Background()
