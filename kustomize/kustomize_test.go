package kustomize

import (
	"bytes"
	"context"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/toa-deploy/toa-deploy/internal/fault"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata from what the code makes now")

// writtenDirs are the folders toa-push writes for the testdata applications, as the manifest
// package's golden files hold them, and the overlay of one.
func writtenDirs(t *testing.T) []string {
	t.Helper()
	dirs, err := filepath.Glob(filepath.Join("..", "manifest", "testdata", "written", "*"))
	if err != nil || len(dirs) == 0 {
		t.Fatalf("no golden kustomizations under ../manifest/testdata/written: %v", err)
	}
	return append([]string{filepath.Join("testdata", "overlay")}, dirs...)
}

// A user's overlay of the folder toa-push writes: another namespace, a patch of each kind, a
// label of its own. It renders, and the selectors stay as the chart has them.
func TestOverlay(t *testing.T) {
	objects, err := Render(context.Background(), filesys.MakeFsOnDisk(), filepath.Join("testdata", "overlay"))
	if err != nil {
		t.Fatal(err)
	}
	golden(t, filepath.Join("testdata", "rendered", "overlay.yaml"), yamlOf(t, objects))
	for _, o := range objects {
		if o.GetNamespace() != "shop-staging" {
			t.Errorf("%s %s in namespace %q", o.GetKind(), o.GetName(), o.GetNamespace())
		}
		labels := o.GetLabels()
		if labels["toa/context"] != "shop" || labels["team"] != "checkout" {
			t.Errorf("%s %s labels %v", o.GetKind(), o.GetName(), labels)
		}
	}
	front := find(t, objects, "Deployment", "composition-front")
	if n, _, _ := unstructured.NestedInt64(front.Object, "spec", "replicas"); n != 3 {
		t.Errorf("replicas %d, want the patch's 3", n)
	}
	selector, _, _ := unstructured.NestedStringMap(front.Object, "spec", "selector", "matchLabels")
	if !reflect.DeepEqual(selector, map[string]string{"toa/composition": "front"}) {
		t.Errorf("selector %v", selector)
	}
	node, _, _ := unstructured.NestedStringMap(front.Object, "spec", "template", "spec", "nodeSelector")
	if node["pool"] != "apps" {
		t.Errorf("nodeSelector %v, want the strategic merge patch's", node)
	}
	containers, _, _ := unstructured.NestedSlice(front.Object, "spec", "template", "spec", "containers")
	// the variables toa-push wrote, and the patch's
	var env []string
	if len(containers) == 1 {
		for _, e := range containers[0].(map[string]any)["env"].([]any) {
			env = append(env, e.(map[string]any)["name"].(string))
		}
	}
	if len(containers) != 1 || !slices.Contains(env, "LOG_LEVEL") || !slices.Contains(env, "TOA_AMQP_CONTEXT") ||
		!slices.Contains(env, "NODE_OPTIONS") || containers[0].(map[string]any)["image"] == nil {
		t.Errorf("the patch replaced the container rather than merging into it: %v", containers)
	}
}

func TestSort(t *testing.T) {
	var objects []*unstructured.Unstructured
	for _, kind := range []string{"Ingress", "Widget", "Deployment", "Service", "Secret", "ConfigMap",
		"ClusterRole", "ServiceAccount", "CustomResourceDefinition", "PersistentVolumeClaim", "Namespace", "StatefulSet"} {
		o := &unstructured.Unstructured{}
		o.SetKind(kind)
		objects = append(objects, o)
	}
	Sort(objects)
	var got []string
	for _, o := range objects {
		got = append(got, o.GetKind())
	}
	want := []string{"Namespace", "CustomResourceDefinition", "ClusterRole", "ServiceAccount", "Secret", "ConfigMap",
		"PersistentVolumeClaim", "Service", "Deployment", "StatefulSet", "Ingress", "Widget"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("order %v, want %v", got, want)
	}
}

func TestRenderRefusesABrokenKustomization(t *testing.T) {
	fs := filesys.MakeFsInMemory()
	fs.WriteFile("/k/kustomization.yaml", []byte("resources: [missing.yaml]\n"))
	_, err := Render(context.Background(), fs, "/k")
	if !fault.IsInput(err) || !strings.Contains(err.Error(), "missing.yaml") {
		t.Errorf("%v", err)
	}
}

// --- helpers ---

func yamlOf(t *testing.T, objects []*unstructured.Unstructured) []byte {
	t.Helper()
	data, err := YAML(objects)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// golden compares data with the file, or rewrites the file under -update.
func golden(t *testing.T, path string, data []byte) {
	t.Helper()
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./kustomize/ -update to write it)", err)
	}
	if !bytes.Equal(data, want) {
		t.Errorf("%s differs (go test ./kustomize/ -update rewrites it; review the diff):\n%s", path, diff(string(want), string(data)))
	}
}

// diff shows the first lines where two texts part.
func diff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	for i := 0; i < len(w) || i < len(g); i++ {
		var wl, gl string
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if wl != gl {
			return "line " + strconv.Itoa(i+1) + ":\n- " + wl + "\n+ " + gl
		}
	}
	return "(same lines)"
}

func find(t *testing.T, objects []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	t.Helper()
	for _, o := range objects {
		if o.GetKind() == kind && o.GetName() == name {
			return o
		}
	}
	t.Fatalf("no %s %s", kind, name)
	return nil
}
