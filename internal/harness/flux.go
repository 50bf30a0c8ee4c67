package harness

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"
)

var crdResource = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// FluxControllers applies the CRDs of Flux's source-controller and kustomize-controller (built
// from their modules by testdata/tools/flux.sh, the CRDs beside them) to the control plane of
// kubeconfig, and runs both controllers as processes of this machine, watching namespace only
// (the control plane is shared), until the test ends. source-controller serves the artifacts it
// pulled on a loopback port, from which kustomize-controller fetches them. Their logs are shown
// when the test fails.
func FluxControllers(t testing.TB, kubeconfig, namespace string) {
	t.Helper()
	source, kustomize := Tool(t, "source-controller"), Tool(t, "kustomize-controller")
	var kinds []schema.GroupVersionResource
	for _, tool := range []string{source, kustomize} {
		kinds = append(kinds, ApplyCRDs(t, kubeconfig, tool+"-crds")...) // flux.sh links them beside the tool
	}
	storage, err := freeLoopbackAddr()
	if err != nil {
		t.Fatal(err)
	}
	sourceHealth, _ := freeLoopbackAddr()
	kustomizeHealth, _ := freeLoopbackAddr()
	common := []string{"--enable-leader-election=false", "--watch-all-namespaces=false", "--metrics-addr=0", "--log-level=debug"}
	startController(t, kubeconfig, namespace, source, append(common, "--health-addr="+sourceHealth,
		"--storage-path="+t.TempDir(), "--storage-addr="+storage, "--storage-adv-addr="+storage))
	startController(t, kubeconfig, namespace, kustomize, append(common, "--health-addr="+kustomizeHealth))
	for _, addr := range []string{sourceHealth, kustomizeHealth} {
		waitHealthy(t, addr)
	}
	// before the controllers stop (cleanups run last first): their objects deleted while they
	// can still take their finalizers off, or the test's namespace stays Terminating for good
	t.Cleanup(func() { deleteFluxObjects(t, kubeconfig, namespace, kinds) })
}

// deleteFluxObjects deletes every object of kinds in namespace and waits up to 30 s for them to
// go; what is left then has its finalizers taken off, so that the namespace can go too.
func deleteFluxObjects(t testing.TB, kubeconfig, namespace string, kinds []schema.GroupVersionResource) {
	client := dynamicClient(t, kubeconfig)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	left := func() []schema.GroupVersionResource {
		var out []schema.GroupVersionResource
		for _, kind := range kinds {
			list, err := client.Resource(kind).Namespace(namespace).List(ctx, metav1.ListOptions{})
			if err == nil && len(list.Items) > 0 {
				out = append(out, kind)
			}
		}
		return out
	}
	for _, kind := range kinds {
		_ = client.Resource(kind).Namespace(namespace).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
	}
	for len(left()) > 0 && ctx.Err() == nil {
		time.Sleep(200 * time.Millisecond)
	}
	bg := context.Background()
	for _, kind := range left() {
		list, err := client.Resource(kind).Namespace(namespace).List(bg, metav1.ListOptions{})
		if err != nil {
			continue
		}
		for _, obj := range list.Items {
			patch := []byte(`{"metadata":{"finalizers":null}}`)
			_, _ = client.Resource(kind).Namespace(namespace).Patch(bg, obj.GetName(), types.MergePatchType, patch, metav1.PatchOptions{})
		}
	}
}

// ApplyCRDs applies every CRD in dir (one per file, as the controllers' config/crd/bases holds
// them) with server-side apply, waits until each is established, and returns the resources they
// serve (each at its storage version).
func ApplyCRDs(t testing.TB, kubeconfig, dir string) []schema.GroupVersionResource {
	t.Helper()
	client := dynamicClient(t, kubeconfig)
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no CRDs in %s (%v): run `bash testdata/tools/flux.sh`", dir, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var served []schema.GroupVersionResource
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var obj unstructured.Unstructured
		if err := yaml.Unmarshal(data, &obj.Object); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if _, err := client.Resource(crdResource).Apply(ctx, obj.GetName(), &obj, metav1.ApplyOptions{FieldManager: "toa-test", Force: true}); err != nil {
			t.Fatalf("apply the CRD %s: %v", obj.GetName(), err)
		}
		for !established(ctx, client, obj.GetName()) {
			select {
			case <-ctx.Done():
				t.Fatalf("the CRD %s is not established after 2m", obj.GetName())
			case <-time.After(200 * time.Millisecond):
			}
		}
		if gvr, ok := storageResource(&obj); ok {
			served = append(served, gvr)
		}
	}
	return served
}

// storageResource is the resource a CRD serves at its storage version.
func storageResource(crd *unstructured.Unstructured) (schema.GroupVersionResource, bool) {
	group, _, _ := unstructured.NestedString(crd.Object, "spec", "group")
	plural, _, _ := unstructured.NestedString(crd.Object, "spec", "names", "plural")
	versions, _, _ := unstructured.NestedSlice(crd.Object, "spec", "versions")
	for _, v := range versions {
		if m, ok := v.(map[string]any); ok && m["storage"] == true {
			name, _ := m["name"].(string)
			return schema.GroupVersionResource{Group: group, Version: name, Resource: plural}, group != "" && plural != "" && name != ""
		}
	}
	return schema.GroupVersionResource{}, false
}

func established(ctx context.Context, client dynamic.Interface, name string) bool {
	crd, err := client.Resource(crdResource).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return false
	}
	conditions, _, _ := unstructured.NestedSlice(crd.Object, "status", "conditions")
	for _, c := range conditions {
		if m, ok := c.(map[string]any); ok && m["type"] == "Established" && m["status"] == "True" {
			return true
		}
	}
	return false
}

func dynamicClient(t testing.TB, kubeconfig string) dynamic.Interface {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	client, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return client
}

// startController runs a controller until the test ends, its log in a file.
func startController(t testing.TB, kubeconfig, namespace, bin string, args []string) {
	t.Helper()
	log := filepath.Join(t.TempDir(), filepath.Base(bin)+".log")
	out, err := os.Create(log)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig, "RUNTIME_NAMESPACE="+namespace, "HOME="+t.TempDir())
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-exited
		out.Close()
		if t.Failed() {
			t.Logf("%s's log (the end):\n%s", filepath.Base(bin), registryLogTail(log, 8000))
		}
	})
}

// waitHealthy waits until a controller's health endpoint answers, at most a minute.
func waitHealthy(t testing.TB, addr string) {
	t.Helper()
	client := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(time.Minute)
	for {
		resp, err := client.Get("http://" + addr + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
			err = fmt.Errorf("GET /healthz: %s", resp.Status)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the controller on %s is not healthy after 1m: %v", addr, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// ApplyYAML applies the objects of a multi-document YAML with server-side apply, in namespace.
func ApplyYAML(t testing.TB, kubeconfig, namespace, docs string) {
	t.Helper()
	client := dynamicClient(t, kubeconfig)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, doc := range strings.Split(docs, "\n---\n") {
		var obj unstructured.Unstructured
		if err := yaml.Unmarshal([]byte(doc), &obj.Object); err != nil {
			t.Fatalf("%v in\n%s", err, doc)
		}
		gvk := obj.GroupVersionKind()
		gvr := schema.GroupVersionResource{Group: gvk.Group, Version: gvk.Version, Resource: plural(gvk.Kind)}
		obj.SetNamespace(namespace)
		if _, err := client.Resource(gvr).Namespace(namespace).Apply(ctx, obj.GetName(), &obj, metav1.ApplyOptions{FieldManager: "toa-test", Force: true}); err != nil {
			t.Fatalf("apply %s %s: %v", gvk.Kind, obj.GetName(), err)
		}
	}
}

// Get reads one object of the resource in namespace, or fails the test.
func Get(t testing.TB, kubeconfig string, gvr schema.GroupVersionResource, namespace, name string) *unstructured.Unstructured {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	obj, err := dynamicClient(t, kubeconfig).Resource(gvr).Namespace(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get %s %s: %v", gvr.Resource, name, err)
	}
	return obj
}

// plural is the resource of a kind, as the API server names the kinds these tests apply.
func plural(kind string) string {
	k := strings.ToLower(kind)
	if strings.HasSuffix(k, "y") {
		return strings.TrimSuffix(k, "y") + "ies"
	}
	return k + "s"
}
