package manifest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/toa-deploy/toa-deploy/internal/app/extension"
	"github.com/toa-deploy/toa-deploy/internal/app/toa"
	"github.com/toa-deploy/toa-deploy/internal/fault"
	"github.com/toa-deploy/toa-deploy/internal/harness"
	"github.com/toa-deploy/toa-deploy/internal/push/image"
	"github.com/toa-deploy/toa-deploy/kustomize"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata from what the code makes now")

// goldenCases are the testdata applications and environments whose kustomization is reviewed.
var goldenCases = []struct {
	app, env string
	mono     bool
}{
	{"derived", "default", false},
	{"declared", "default", false},
	{"declared", "dev", false},
	{"declared", "staging", false},
	{"declared", "production", false},
	{"declared", "production", true},
	{"nopackage", "default", false},
	{"extended", "default", false},
	{"extended", "hosted", false},
	{"extended", "default", true},
	// modelled on Toa's own examples: its integration context, its userland example, the
	// workspace of its deployment features
	{"dummies", "default", false},
	{"dummies", "dev", false},
	{"dummies", "staging", false},
	{"examples", "default", false},
	{"collection", "default", false},
	{"collection", "docker", false},
}

func caseName(app, env string, mono bool) string {
	if mono {
		return app + "." + env + ".mono"
	}
	return app + "." + env
}

// TestGolden writes the kustomization of each testdata application and renders it in memory:
// both must equal the reviewed files, testdata/written/<app>.<env>/ and
// testdata/rendered/<app>.<env>.yaml. Run `go test ./manifest/ -update` to rewrite them, then
// read the diff.
func TestGolden(t *testing.T) {
	for _, tc := range goldenCases {
		name := caseName(tc.app, tc.env, tc.mono)
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "deployment")
			writeMono(t, tc.app, tc.env, tc.mono, dir)
			written := filepath.Join("testdata", "written", name)
			compareFolders(t, dir, written)

			rendered := renderInMemory(t, dir)
			golden(t, filepath.Join("testdata", "rendered", name+".yaml"), yamlOf(t, rendered))
		})
	}
}

// The toa/context label goes on every object and nowhere else: a Deployment's selector is
// immutable, and the pod template's labels would roll every pod out.
func TestContextLabelLeavesSelectorsAlone(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "deployment")
	writeApp(t, "declared", "default", dir)
	objects := renderInMemory(t, dir)
	for _, o := range objects {
		if o.GetLabels()[ContextLabel] != "shop" {
			t.Errorf("%s %s has no %s label: %v", o.GetKind(), o.GetName(), ContextLabel, o.GetLabels())
		}
		for _, path := range [][]string{
			{"spec", "selector", "matchLabels"}, {"spec", "selector"}, {"spec", "template", "metadata", "labels"},
		} {
			m, _, _ := unstructured.NestedStringMap(o.Object, path...)
			if _, ok := m[ContextLabel]; ok {
				t.Errorf("%s %s: %s has %s", o.GetKind(), o.GetName(), strings.Join(path, "."), ContextLabel)
			}
		}
		if o.GetKind() == "Deployment" {
			tsc, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "topologySpreadConstraints")
			m, _, _ := unstructured.NestedStringMap(tsc[0].(map[string]any), "labelSelector", "matchLabels")
			if len(m) != 1 {
				t.Errorf("%s: topology spread selector %v", o.GetName(), m)
			}
		}
	}
}

// An image the registry has is pinned by digest; one not pushed yet by its tag.
func TestImages(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "deployment")
	writeApp(t, "declared", "default", dir)
	objects := renderInMemory(t, dir)
	front := find(t, objects, "Deployment", "composition-front")
	back := find(t, objects, "Deployment", "composition-back")
	if got, want := renderedImage(t, front), "localhost:5000/acme/shop/composition-front@"+fakeDigest("composition-front"); got != want {
		t.Errorf("front: %s, want %s", got, want)
	}
	if got, want := renderedImage(t, back), "localhost:5000/acme/shop/composition-back:"+fakeTag("composition-back"); got != want {
		t.Errorf("back: %s, want %s", got, want)
	}
}

func TestWriteReplacesItsOwnFolderOnly(t *testing.T) {
	parent := t.TempDir()
	dir := filepath.Join(parent, "deployment")
	writeApp(t, "declared", "default", dir)
	if err := os.WriteFile(filepath.Join(dir, "stale.yaml"), []byte("kind: Stale\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// a file toa-push did not write is refused by name (issue 26), and left where it is
	err := WriteKustomization(dir, map[string][]byte{KustomizationFile: []byte(header)})
	if !fault.IsInput(err) || !strings.Contains(err.Error(), "holds files toa-push did not write (stale.yaml)") {
		t.Errorf("a folder with a file toa-push did not write: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "stale.yaml")); err != nil {
		t.Errorf("a refused write removed the file: %v", err)
	}
	os.Remove(filepath.Join(dir, "stale.yaml"))
	writeApp(t, "derived", "default", dir)
	data, _ := os.ReadFile(filepath.Join(dir, KustomizationFile))
	if !bytes.Contains(data, []byte("toa/context: derived")) {
		t.Errorf("not replaced:\n%s", data)
	}
	entries, _ := os.ReadDir(parent)
	if len(entries) != 1 {
		t.Errorf("left beside it: %v", entries)
	}

	// an empty folder is taken; a folder of anything else is not
	empty := filepath.Join(parent, "empty")
	os.Mkdir(empty, 0o755)
	writeApp(t, "derived", "default", empty)
	for _, foreign := range []string{parent, filepath.Join(parent, "deployment", "services.yaml")} {
		err := WriteKustomization(foreign, map[string][]byte{KustomizationFile: []byte("x")})
		var e *fault.Input
		if !errors.As(err, &e) {
			t.Errorf("%s: %v, want a *fault.Input", foreign, err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, KustomizationFile)); err != nil {
		t.Errorf("a refused write touched the folder: %v", err)
	}
}

// --- helpers ---

// writeApp writes the kustomization of a testdata application, with made-up tags (the real ones
// depend on the bases and on the machine's node and npm) and the first image pinned by digest,
// as if the registry had it.
func writeApp(t *testing.T, app, env, dir string) {
	t.Helper()
	writeMono(t, app, env, false, dir)
}

// writeMono is writeApp, of the mono deployment when mono is true. The extensions the
// application uses are asked what they deploy: the stand-ins linked under its node_modules.
func writeMono(t *testing.T, app, env string, mono bool, dir string) {
	t.Helper()
	harness.Program(t, "node", nodeInstall)
	a, err := toa.Load(filepath.Join("..", "testdata", "apps", app), env)
	if err != nil {
		t.Fatal(err)
	}
	res, err := extension.Resolve(context.Background(), a)
	if err != nil {
		t.Fatal(err)
	}
	deps := Merge(res)
	plan, err := image.NewPlan(a, image.PlanOptions{Mono: mono, Services: serviceImagesOf(a, deps, mono)})
	if err != nil {
		t.Fatal(err)
	}
	var pins []types.Image
	for i, img := range plan.Images() {
		pin := types.Image{Name: img.Repository, NewTag: fakeTag(img.Name)}
		if i == 0 {
			pin.Digest = fakeDigest(img.Name)
		}
		pins = append(pins, pin)
	}
	objects, err := Objects(a, planned(plan, mono, fakeTag), WithDependencies(deps))
	if err != nil {
		t.Fatal(err)
	}
	files, err := Kustomization(objects, pins, a.Name)
	if err != nil {
		t.Fatal(err)
	}
	if err := WriteKustomization(dir, files); err != nil {
		t.Fatal(err)
	}
}

// serviceImagesOf are the images toa-push builds of the application's extension services, as
// the pipeline names them.
func serviceImagesOf(app *toa.Application, deps *Dependencies, mono bool) []image.Service {
	var out []image.Service
	for _, s := range ServiceImages(app, deps, mono) {
		out = append(out, image.Service{Name: s.ObjectName(), Reference: s.Reference, Dir: s.Dir, Version: s.Version})
	}
	return out
}

// planned are the plan's images as the pipeline hands them to Objects, tagged by tag.
func planned(plan *image.Plan, mono bool, tag func(name string) string) Images {
	out := Images{Mono: mono}
	for _, img := range plan.Images() {
		w := Image{Kind: KindMono, Name: img.Name, Reference: img.Repository + ":" + tag(img.Name)}
		switch {
		case img.Composition != nil:
			w.Kind, w.Composition = KindComposition, img.Composition.Name
		case img.Service != nil:
			w.Kind = KindService
		}
		out.List = append(out.List, w)
	}
	return out
}

func fakeTag(name string) string {
	sum := sha256.Sum256([]byte(name))
	return hex.EncodeToString(sum[:4])
}

func fakeDigest(name string) string {
	sum := sha256.Sum256([]byte(name + " pushed"))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// renderInMemory copies the folder into an in-memory file system and renders it there.
func renderInMemory(t *testing.T, dir string) []*unstructured.Unstructured {
	t.Helper()
	fs := filesys.MakeFsInMemory()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := fs.WriteFile("/deployment/"+e.Name(), data); err != nil {
			t.Fatal(err)
		}
	}
	objects, err := kustomize.Render(context.Background(), fs, "/deployment")
	if err != nil {
		t.Fatal(err)
	}
	return objects
}

func yamlOf(t *testing.T, objects []*unstructured.Unstructured) []byte {
	t.Helper()
	data, err := kustomize.YAML(objects)
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
		t.Fatalf("%v (run go test ./manifest/ -update to write it)", err)
	}
	if !bytes.Equal(data, want) {
		t.Errorf("%s differs (go test ./manifest/ -update rewrites it; review the diff):\n%s", path, diff(string(want), string(data)))
	}
}

// compareFolders compares the files of got with the golden folder, or rewrites it under -update.
func compareFolders(t *testing.T, got, want string) {
	t.Helper()
	if *update {
		os.RemoveAll(want)
	}
	gotNames := fileNames(t, got)
	for _, name := range gotNames {
		data, err := os.ReadFile(filepath.Join(got, name))
		if err != nil {
			t.Fatal(err)
		}
		golden(t, filepath.Join(want, name), data)
	}
	if !*update {
		wantNames := fileNames(t, want)
		if !reflect.DeepEqual(gotNames, wantNames) {
			t.Errorf("files %v, want %v", gotNames, wantNames)
		}
	}
}

func fileNames(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	sort.Strings(out)
	return out
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

func renderedImage(t *testing.T, d *unstructured.Unstructured) string {
	t.Helper()
	containers, _, _ := unstructured.NestedSlice(d.Object, "spec", "template", "spec", "containers")
	if len(containers) != 1 {
		t.Fatalf("%s: containers %v", d.GetName(), containers)
	}
	return containers[0].(map[string]any)["image"].(string)
}

// marshal makes the bytes of the longer way it replaced: runtime's unstructured converter, then
// sigs.k8s.io/yaml's Marshal (JSON text, read back by YAML's parser). Values a YAML reader could
// take for another type, numbers of every size, quantities and multi-line text.
func TestMarshalAsTheConverter(t *testing.T) {
	strs := []string{"yes", "no", "on", "8080", "1e3", "0x1F", "null", "~", "", " lead", "a: b", "- x",
		"multi\nline\n", "tab\there", "ünïcode ✓", `"quoted"`, "#hash", "3.14", "-0", ".inf"}
	env := []corev1.EnvVar{}
	data := map[string]string{}
	for i, s := range strs {
		env = append(env, corev1.EnvVar{Name: fmt.Sprintf("V%d", i), Value: s})
		data[fmt.Sprintf("k%d", i)] = s
	}
	replicas := int32(3)
	deadline := int64(1 << 53)
	objects := []runtime.Object{
		&appsv1.Deployment{TypeMeta: metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
			ObjectMeta: metav1.ObjectMeta{Name: "d", Labels: map[string]string{"x": "true"}},
			Spec: appsv1.DeploymentSpec{Replicas: &replicas, ProgressDeadlineSeconds: &replicas,
				Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{ActiveDeadlineSeconds: &deadline,
					Containers: []corev1.Container{{Name: "c", Image: "r/i:1", Env: env,
						Ports: []corev1.ContainerPort{{ContainerPort: 8080}},
						Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{
							corev1.ResourceMemory: resource.MustParse("1.5Gi"), corev1.ResourceCPU: resource.MustParse("250m")}}}}}}}},
		&corev1.Service{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Service"}, ObjectMeta: metav1.ObjectMeta{Name: "s"},
			Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromString("http")},
				{Port: 443, TargetPort: intstr.FromInt32(8443)}}}},
		&corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"}, ObjectMeta: metav1.ObjectMeta{Name: "m"}, Data: data},
	}
	for _, obj := range objects {
		m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
		if err != nil {
			t.Fatal(err)
		}
		delete(m, "status")
		prune(m)
		want, err := sigsyaml.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		got, err := marshal(obj)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s: marshal wrote\n%s\nthe converter's way\n%s", obj.GetObjectKind().GroupVersionKind().Kind, got, want)
		}
	}
}
