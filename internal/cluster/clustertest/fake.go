// Package clustertest makes a cluster.Client of client-go's fakes, for the unit tests of the
// rooms that talk to a cluster (rollout, revision, release). It is never linked into a command.
package clustertest

import (
	"context"
	"encoding/json"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	clienttesting "k8s.io/client-go/testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	metadatafake "k8s.io/client-go/metadata/fake"

	"github.com/toa-deploy/toa-deploy/internal/cluster"
)

// fakeMapper is a REST mapper of the kinds the hermetic tests use.
type fakeMapper struct{ *meta.DefaultRESTMapper }

func (fakeMapper) Reset() {}

// New is client-go's fake dynamic client (and clientset) behind a cluster.Client: hermetic
// tests of apply, prune, delete, revisions and the lock. It has no server-side apply semantics beyond
// create-or-merge, no admission and no garbage collector: the real control plane's tests cover
// those.
func New(objects ...runtime.Object) *cluster.Client {
	kinds := map[schema.GroupVersionResource]string{
		{Version: "v1", Resource: "secrets"}:                                                 "SecretList",
		{Version: "v1", Resource: "services"}:                                                "ServiceList",
		{Version: "v1", Resource: "configmaps"}:                                              "ConfigMapList",
		{Version: "v1", Resource: "namespaces"}:                                              "NamespaceList",
		{Group: "apps", Version: "v1", Resource: "deployments"}:                              "DeploymentList",
		{Group: "coordination.k8s.io", Version: "v1", Resource: "leases"}:                    "LeaseList",
		{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterrolebindings"}: "ClusterRoleBindingList",
	}
	clusterScoped := map[string]bool{"namespaces": true, "clusterrolebindings": true}
	var versions []schema.GroupVersion
	for gvr := range kinds {
		versions = append(versions, gvr.GroupVersion())
	}
	m := meta.NewDefaultRESTMapper(versions)
	for gvr, list := range kinds {
		scope := meta.RESTScopeNamespace
		if clusterScoped[gvr.Resource] {
			scope = meta.RESTScopeRoot
		}
		m.Add(gvr.GroupVersion().WithKind(list[:len(list)-4]), scope)
	}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), kinds, objects...)
	// the fake cannot server-side apply unstructured objects: one manager's apply of a whole
	// object, as ours are, replaces what it applied before
	// annotations another manager set with a merge patch stay through an apply that does not
	// name them, as server-side apply keeps what another manager owns
	merged := map[string]map[string]bool{}
	dyn.PrependReactor("patch", "*", func(action clienttesting.Action) (bool, runtime.Object, error) {
		pa, ok := action.(clienttesting.PatchActionImpl)
		key := pa.GetResource().String() + "/" + pa.GetNamespace() + "/" + pa.GetName()
		if ok && pa.GetPatchType() == types.MergePatchType {
			var patch struct {
				Metadata struct{ Annotations map[string]any }
			}
			_ = json.Unmarshal(pa.GetPatch(), &patch)
			for k := range patch.Metadata.Annotations {
				if merged[key] == nil {
					merged[key] = map[string]bool{}
				}
				merged[key][k] = true
			}
		}
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
		for k := range merged[key] {
			if v, ok := old.GetAnnotations()[k]; ok {
				a := obj.GetAnnotations()
				if a == nil {
					a = map[string]string{}
				}
				if _, set := a[k]; !set {
					a[k] = v
					obj.SetAnnotations(a)
				}
			}
		}
		obj.SetUID(old.GetUID())
		obj.SetOwnerReferences(old.GetOwnerReferences())
		if len(pa.PatchOptions.DryRun) == 0 {
			err = dyn.Tracker().Update(pa.GetResource(), obj, pa.GetNamespace())
		}
		return true, obj, err
	})
	return &cluster.Client{Dynamic: dyn, Typed: fake.NewClientset(), Metadata: metadataOf(dyn), Mapper: fakeMapper{m}, Host: "fake"}
}

// metadataOf is a metadata client that lists what the dynamic fake holds, as the API server's
// metadata answers do: the objects' metadata alone.
func metadataOf(dyn *dynamicfake.FakeDynamicClient) *metadatafake.FakeMetadataClient {
	md := metadatafake.NewSimpleMetadataClient(metadatafake.NewTestScheme())
	md.PrependReactor("list", "*", func(action clienttesting.Action) (bool, runtime.Object, error) {
		la := action.(clienttesting.ListActionImpl)
		ri := dyn.Resource(la.GetResource())
		var list *unstructured.UnstructuredList
		var err error
		opts := metav1.ListOptions{LabelSelector: la.GetListRestrictions().Labels.String()}
		if ns := la.GetNamespace(); ns != "" {
			list, err = ri.Namespace(ns).List(context.Background(), opts)
		} else {
			list, err = ri.List(context.Background(), opts)
		}
		if err != nil {
			return true, nil, err
		}
		out := &metav1.List{} // what the fake makes its PartialObjectMetadataList of
		for _, item := range list.Items {
			pm := &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: item.GetAPIVersion(), Kind: item.GetKind()}}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(item.Object["metadata"].(map[string]any), &pm.ObjectMeta); err != nil {
				return true, nil, err
			}
			out.Items = append(out.Items, runtime.RawExtension{Object: pm})
		}
		return true, out, nil
	})
	return md
}
