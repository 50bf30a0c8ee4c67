package kustomize

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// The same objects come out of `kubectl kustomize DIR` as out of Render: for the folders toa-push
// writes (the manifest package's reviewed golden ones) and for a user's overlay of one.
func TestKubectlKustomizeAgrees(t *testing.T) {
	kubectl := findKubectl(t)
	dirs := writtenDirs(t)
	for _, dir := range dirs {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			cmd := exec.Command(kubectl, "kustomize", dir)
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			if err := cmd.Run(); err != nil {
				t.Fatalf("%s kustomize %s: %v\n%s", kubectl, dir, err, stderr.String())
			}
			theirs := canonical(t, decodeStream(t, stdout.Bytes()))
			objects, err := Render(context.Background(), filesys.MakeFsOnDisk(), dir)
			if err != nil {
				t.Fatal(err)
			}
			var maps []map[string]any
			for _, o := range objects {
				maps = append(maps, o.Object)
			}
			ours := canonical(t, maps)
			if len(ours) != len(theirs) {
				t.Fatalf("rendered %v, kubectl %v", keys(ours), keys(theirs))
			}
			for key, obj := range ours {
				if theirs[key] != obj {
					t.Errorf("%s differs:\nours   %s\nkubectl %s", key, obj, theirs[key])
				}
			}
		})
	}
}

// findKubectl finds the kubectl built with the control plane, else one on PATH. Without one the
// test fails, unless TOA_TEST_NO_CLUSTER=1 says the machine has no cluster tools or -short asks
// for the tests that need nothing installed.
func findKubectl(t *testing.T) string {
	t.Helper()
	if os.Getenv("TOA_TEST_NO_CLUSTER") == "1" {
		t.Skip("TOA_TEST_NO_CLUSTER=1: no kubectl")
	}
	cache := os.Getenv("TOA_CACHE")
	if cache == "" {
		home, _ := os.UserHomeDir()
		cache = filepath.Join(home, ".cache", "toa-deploy")
	}
	state := os.Getenv("TOA_TEST_STATE")
	if state == "" {
		state = filepath.Join(cache, "controlplane", "run")
	}
	candidates := []string{os.Getenv("TOA_KUBECTL"),
		filepath.Join(cache, "controlplane", "bin", "kubectl"),
		filepath.Join(state, "bin", "kubectl")}
	built, _ := filepath.Glob(filepath.Join(cache, "controlplane", "bin", "*", "kubectl"))
	for _, b := range built {
		if !strings.HasSuffix(filepath.Dir(b), ".tmp") {
			candidates = append(candidates, b)
		}
	}
	for _, c := range candidates {
		if c == "" {
			continue
		}
		if info, err := os.Stat(c); err == nil && !info.IsDir() {
			logVersion(t, c)
			return c
		}
	}
	if p, err := exec.LookPath("kubectl"); err == nil {
		logVersion(t, p)
		return p
	}
	if testing.Short() {
		t.Skip("-short: no kubectl, this test runs one")
	}
	t.Fatalf("no kubectl: looked for %s, and on PATH. Build the control plane's "+
		"(testdata/controlplane/up.sh), set TOA_KUBECTL, or set TOA_TEST_NO_CLUSTER=1 on a machine without cluster tools",
		strings.Join(candidates[1:], ", "))
	return ""
}

func logVersion(t *testing.T, kubectl string) {
	out, err := exec.Command(kubectl, "version", "--client").CombinedOutput()
	if err != nil {
		t.Logf("%s: %v", kubectl, err)
		return
	}
	t.Logf("%s: %s", kubectl, strings.Join(strings.Fields(string(out)), " "))
}

// decodeStream reads a YAML stream of objects.
func decodeStream(t *testing.T, data []byte) []map[string]any {
	t.Helper()
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var out []map[string]any
	for {
		var obj map[string]any
		err := dec.Decode(&obj)
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		if obj != nil {
			out = append(out, obj)
		}
	}
}

// canonical keys objects by kind, namespace and name, each written as JSON with sorted keys and
// numbers read alike.
func canonical(t *testing.T, objects []map[string]any) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, m := range objects {
		o := &unstructured.Unstructured{Object: m}
		data, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		var again any
		if err := json.Unmarshal(data, &again); err != nil {
			t.Fatal(err)
		}
		data, _ = json.Marshal(again)
		key := o.GetKind() + " " + o.GetNamespace() + "/" + o.GetName()
		if _, dup := out[key]; dup {
			t.Errorf("%s twice", key)
		}
		out[key] = string(data)
	}
	return out
}

// keys lists a canonical map's keys, sorted, for messages.
func keys(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
