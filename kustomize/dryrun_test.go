package kustomize

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/toa-deploy/toa-deploy/internal/harness"
)

// Every object rendered from the testdata applications, and from the overlay, is accepted by a
// real API server: a server-side apply with dryRun=All, which runs validation and admission and
// stores nothing. The namespaced ones go to a namespace of the test's own.
func TestServerSideDryRun(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the local control plane")
	}
	if os.Getenv("TOA_TEST_NO_CLUSTER") == "1" {
		t.Skip("TOA_TEST_NO_CLUSTER=1: no control plane")
	}
	kubeconfig := harness.Kubeconfig(t)
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	disco, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disco))
	namespace := testNamespace(t, cfg)

	dirs := writtenDirs(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, dir := range dirs {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			objects, err := Render(context.Background(), filesys.MakeFsOnDisk(), dir)
			if err != nil {
				t.Fatal(err)
			}
			for _, obj := range objects {
				if err := dryRunApply(ctx, dyn, mapper, namespace, obj); err != nil {
					t.Errorf("%s %s: %v", obj.GetKind(), obj.GetName(), err)
				}
			}
		})
	}
}

// dryRunApply server-side applies obj with dryRun=All, as field manager toa.
func dryRunApply(ctx context.Context, dyn dynamic.Interface, mapper meta.RESTMapper, namespace string, obj *unstructured.Unstructured) error {
	gvk := obj.GroupVersionKind()
	mapping, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return fmt.Errorf("map %s: %w", gvk, err)
	}
	var client dynamic.ResourceInterface = dyn.Resource(mapping.Resource)
	if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
		obj = obj.DeepCopy()
		obj.SetNamespace(namespace)
		client = dyn.Resource(mapping.Resource).Namespace(namespace)
	}
	_, err = client.Apply(ctx, obj.GetName(), obj, metav1.ApplyOptions{FieldManager: "toa", DryRun: []string{metav1.DryRunAll}})
	return err
}

// testNamespace creates a namespace for the test, really (a dry run of one stores nothing for
// the objects in it to be checked against), and deletes it at the end.
func testNamespace(t *testing.T, cfg *rest.Config) string {
	t.Helper()
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ns, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		GenerateName: "toa-test-dryrun-", Labels: map[string]string{"toa-test/test": "true"}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create a namespace for the test: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := cs.CoreV1().Namespaces().Delete(ctx, ns.Name, metav1.DeleteOptions{}); err != nil {
			t.Errorf("delete namespace %s: %v", ns.Name, err)
		}
	})
	return ns.Name
}
