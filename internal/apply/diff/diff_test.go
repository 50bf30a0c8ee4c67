package diff

import (
	"context"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/toa-deploy/toa-deploy/internal/cluster/clustertest"
	"github.com/toa-deploy/toa-deploy/rollout"
)

func TestUnified(t *testing.T) {
	a := strings.Split("a b c d e f g h i j k l m", " ")
	b := strings.Split("a b c D e f g h i j k l m n", " ")
	want := `--- x
+++ y
@@ -1,7 +1,7 @@
 a
 b
 c
-d
+D
 e
 f
 g
@@ -11,3 +11,4 @@
 k
 l
 m
+n
`
	if got := Unified("x", "y", a, b); got != want {
		t.Errorf("Unified =\n%s\nwant\n%s", got, want)
	}
	if got := Unified("x", "y", a, a); got != "" {
		t.Errorf("the same lines differ:\n%s", got)
	}
	if got := Unified("x", "y", nil, []string{"new"}); got != "--- x\n+++ y\n@@ -0,0 +1 @@\n+new\n" {
		t.Errorf("a created object:\n%q", got)
	}
}

// What Unified writes, GNU patch reads: applied to a, it gives b, for random texts.
func TestUnifiedPatches(t *testing.T) {
	patch, err := exec.LookPath("patch")
	if err != nil && testing.Short() {
		t.Skip("-short: no patch(1) on this machine")
	}
	if err != nil {
		t.Fatal("no patch(1) on this machine: testdata/readers/install.sh (make test) installs it")
	}
	r := rand.New(rand.NewPCG(1, 2))
	random := func() []string {
		lines := make([]string, r.IntN(30))
		for i := range lines {
			lines[i] = string(rune('a' + r.IntN(5)))
		}
		return lines
	}
	dir := t.TempDir()
	for i := range 40 {
		a, b := random(), random()
		diff := Unified("a", "b", a, b)
		file := filepath.Join(dir, "a")
		text := func(lines []string) string {
			if len(lines) == 0 {
				return ""
			}
			return strings.Join(lines, "\n") + "\n"
		}
		if err := os.WriteFile(file, []byte(text(a)), 0o644); err != nil {
			t.Fatal(err)
		}
		if diff == "" {
			if text(a) != text(b) {
				t.Fatalf("case %d: no diff between %q and %q", i, a, b)
			}
			continue
		}
		cmd := exec.Command(patch, "-s", "-f", file)
		cmd.Stdin = strings.NewReader(diff)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("case %d: patch: %v: %s\n%s", i, err, out, diff)
		}
		got, _ := os.ReadFile(file)
		if string(got) != text(b) {
			t.Fatalf("case %d: patched %q, want %q\n%s", i, got, text(b), diff)
		}
		if n, m := len(lineDiff(a, b)), len(a)+len(b); n > m {
			t.Fatalf("case %d: %d edits for %d lines", i, n, m)
		}
	}
}

func TestDiffs(t *testing.T) {
	obj := func(kind, name string, spec map[string]any) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": kind,
			"metadata": map[string]any{"name": name, "namespace": "ns", "resourceVersion": "7",
				"managedFields": []any{map[string]any{"manager": "toa"}}},
			"spec": spec, "status": map[string]any{"phase": "x"}}}
	}
	secret := func(data map[string]any) *unstructured.Unstructured {
		s := obj("Secret", "s", nil)
		s.Object["data"] = data
		return s
	}
	ref := func(kind, name string) rollout.Ref {
		return rollout.Ref{Version: "v1", Kind: kind, Namespace: "ns", Name: name}
	}
	res := &rollout.Result{
		Applied: []rollout.Applied{
			{Ref: ref("ConfigMap", "same"), Live: obj("ConfigMap", "same", map[string]any{"a": "1"}), Object: obj("ConfigMap", "same", map[string]any{"a": "1"})},
			{Ref: ref("Service", "changed"), Live: obj("Service", "changed", map[string]any{"port": "1"}), Object: obj("Service", "changed", map[string]any{"port": "2"})},
			{Ref: ref("Secret", "s"), Live: secret(map[string]any{"kept": "YQ==", "changed": "Yg==", "gone": "Yw=="}),
				Object: secret(map[string]any{"kept": "YQ==", "changed": "ZA==", "new": "ZQ=="})},
			{Ref: ref("ConfigMap", "new"), Object: obj("ConfigMap", "new", map[string]any{"a": "1"})},
		},
		Pruned:        []rollout.Ref{ref("Service", "old")},
		PrunedObjects: []*unstructured.Unstructured{obj("Service", "old", map[string]any{"port": "3"})},
	}
	diffs, err := Diffs(res)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, d := range diffs {
		got = append(got, d.Name+" "+string(d.Change))
		for _, leak := range []string{"managedFields", "resourceVersion", "phase", "YQ==", "Yg==", "ZA=="} {
			if strings.Contains(d.Diff, leak) {
				t.Errorf("%s: the diff shows %s:\n%s", d.Name, leak, d.Diff)
			}
		}
	}
	if strings.Join(got, ", ") != "changed configured, s configured, new created, old pruned" {
		t.Errorf("diffs: %s", strings.Join(got, ", "))
	}
	for _, part := range []string{"-  changed: '*** (before)'", "+  changed: '*** (after)'", "-  gone: '***'", "+  new: '***'", "   kept: '***'"} {
		if !strings.Contains(diffs[1].Diff, part) {
			t.Errorf("the Secret's diff lacks %q:\n%s", part, diffs[1].Diff)
		}
	}
	if !strings.HasPrefix(diffs[0].Diff, "--- LIVE/v1.Service.ns.changed\n+++ MERGED/v1.Service.ns.changed\n") ||
		!strings.Contains(diffs[0].Diff, "-  port: \"1\"\n+  port: \"2\"\n") {
		t.Errorf("the Service's diff:\n%s", diffs[0].Diff)
	}
	if !strings.Contains(diffs[3].Diff, "-  port: \"3\"") || strings.Count(diffs[3].Diff, "\n+") != 1 {
		t.Errorf("the pruned Service's diff:\n%s", diffs[3].Diff)
	}
}

// A dry run's Diffs: the changed image, and what prune would delete; nothing changes.
func TestDryRunDiffs(t *testing.T) {
	k := clustertest.New()
	bg := context.Background()
	labels := map[string]any{rollout.LabelContext: "shop"}
	deployment := func(image string) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "apps/v1", "kind": "Deployment",
			"metadata": map[string]any{"name": "composition-a", "labels": labels},
			"spec": map[string]any{"template": map[string]any{"spec": map[string]any{
				"containers": []any{map[string]any{"name": "app", "image": image}}}}}}}
	}
	configMap := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": "c", "labels": labels}}}
	opts := rollout.Options{Namespace: "ns", Prune: true}
	if _, err := rollout.Apply(bg, k, []*unstructured.Unstructured{deployment("r/a:1"), configMap}, opts); err != nil {
		t.Fatal(err)
	}
	opts.DryRun = true
	res, err := rollout.Apply(bg, k, []*unstructured.Unstructured{deployment("r/a:2")}, opts)
	if err != nil {
		t.Fatal(err)
	}
	diffs, err := Diffs(res)
	if err != nil {
		t.Fatal(err)
	}
	if len(diffs) != 2 || diffs[0].Change != rollout.Configured || diffs[1].Change != Pruned ||
		!strings.Contains(diffs[0].Diff, "-      - image: r/a:1\n+      - image: r/a:2\n") || !strings.Contains(diffs[1].Diff, "-kind: ConfigMap") {
		t.Fatalf("diffs: %+v", diffs)
	}
	res, err = rollout.Apply(bg, k, []*unstructured.Unstructured{deployment("r/a:1"), configMap}, opts)
	if err != nil {
		t.Fatal(err)
	}
	if diffs, _ := Diffs(res); len(diffs) != 0 {
		t.Errorf("the dry run changed something, or the same objects differ: %+v", diffs)
	}
}
