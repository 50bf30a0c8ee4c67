package revision

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/toa-deploy/toa-deploy/internal/cluster"
	"github.com/toa-deploy/toa-deploy/internal/cluster/clustertest"
	"github.com/toa-deploy/toa-deploy/internal/fault"
	"github.com/toa-deploy/toa-deploy/rollout"
)

var bg = context.Background()

func configMap(name string, data map[string]any) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": name, "labels": map[string]any{rollout.LabelContext: "shop"}}, "data": data}}
}

func withImage(name, image string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "apps/v1", "kind": "Deployment",
		"metadata": map[string]any{"name": name, "labels": map[string]any{rollout.LabelContext: "shop"}},
		"spec": map[string]any{"template": map[string]any{"spec": map[string]any{
			"containers": []any{map[string]any{"name": "app", "image": image}}}}}}}
}

// Apply, then record revisions, list them, keep --history-max, load one back, find the
// application, and delete: revisions and parent go with the set.
func TestRevisions(t *testing.T) {
	k := clustertest.New()
	set := rollout.NewSet("shop", "ns")
	opts := rollout.Options{Namespace: "ns", Prune: true, Version: "v1.0.0"}
	var applied [][]*unstructured.Unstructured
	for i, image := range []string{"r/shop/a:1", "r/shop/a:2", "r/shop/a:3", "r/shop/a:4"} {
		objects := []*unstructured.Unstructured{withImage("composition-a", image), configMap("c", map[string]any{"n": image})}
		if i < 2 {
			objects = append(objects, configMap("extra", nil))
		}
		res, err := rollout.Apply(bg, k, objects, opts)
		if err != nil {
			t.Fatalf("apply %d: %v", i+1, err)
		}
		if i == 2 && (len(res.Pruned) != 1 || res.Pruned[0].Name != "extra") {
			t.Errorf("apply 3 pruned %v, want configmap/extra", res.Pruned)
		}
		rev, err := record(bg, k, set, objects, RecordOptions{Description: "apply", Version: "v1.0.0", Max: 3}, time.Unix(int64(1e9+i), 0))
		if err != nil {
			t.Fatalf("record %d: %v", i+1, err)
		}
		if rev.Number != i+1 || rev.Secret != "toa-shop.v"+string(rune('1'+i)) || rev.Status != Deployed {
			t.Errorf("revision %+v, want number %d", rev, i+1)
		}
		applied = append(applied, objects)
	}
	h, err := Read(bg, k, set)
	if err != nil {
		t.Fatal(err)
	}
	var numbers []int
	for _, r := range h.Revisions {
		numbers = append(numbers, r.Number)
	}
	if !slices.Equal(numbers, []int{2, 3, 4}) || len(h.Skipped) != 0 {
		t.Errorf("revisions %v, skipped %v; want the last 3 of 4", numbers, h.Skipped)
	}
	if r := h.Revisions[2]; r.Description != "apply" || !slices.Equal(r.Images, []string{"r/shop/a:4"}) || r.Objects != 2 ||
		r.Tooling != "toa-apply/v1.0.0" || !r.Time.Equal(time.Unix(1e9+3, 0)) || r.Status != Deployed {
		t.Errorf("revision 4: %+v", r)
	}

	rev, objects, err := Load(bg, k, set, 0)
	if err != nil || rev.Number != 3 {
		t.Fatalf("the previous revision: %+v, %v; want 3", rev, err)
	}
	if len(objects) != 2 || !slices.Equal(imagesOf(objects), []string{"r/shop/a:3"}) {
		t.Errorf("revision 3's objects: %v", objects)
	}
	if _, _, err := Load(bg, k, set, 1); !errors.Is(err, ErrNoRevision) || fault.ClassOf(err) != fault.ClassInput ||
		!strings.Contains(err.Error(), "it has: 2, 3, 4") {
		t.Errorf("a revision beyond --history-max: %v", err)
	}
	if apps, err := rollout.Applications(bg, k, "ns"); err != nil || !slices.Equal(apps, []string{"shop"}) {
		t.Errorf("applications = %v, %v; want shop", apps, err)
	}

	if _, err := rollout.Delete(bg, k, applied[3], opts); err != nil {
		t.Fatalf("delete: %v", err)
	}
	if err := DeleteAll(bg, k, set); err != nil {
		t.Fatalf("delete the revisions: %v", err)
	}
	if items, _ := list(bg, k, set); len(items) != 0 {
		t.Errorf("%d revisions left after Delete", len(items))
	}
	if apps, _ := rollout.Applications(bg, k, "ns"); len(apps) != 0 {
		t.Errorf("applications after Delete: %v", apps)
	}
}

func TestNoPreviousRevision(t *testing.T) {
	k := clustertest.New()
	set := rollout.NewSet("shop", "ns")
	if _, err := rollout.Apply(bg, k, []*unstructured.Unstructured{configMap("c", nil)}, rollout.Options{Namespace: "ns"}); err != nil {
		t.Fatal(err)
	}
	if _, err := record(bg, k, set, []*unstructured.Unstructured{configMap("c", nil)}, RecordOptions{}, time.Now()); err != nil {
		t.Fatal(err)
	}
	_, _, err := Load(bg, k, set, 0)
	if !errors.Is(err, ErrNoRevision) || !strings.Contains(err.Error(), "has 1 revision recorded") {
		t.Errorf("a rollback with one revision: %v", err)
	}
}

// Failed revisions are recorded and listed, and never picked by a rollback.
func TestFailedRevisions(t *testing.T) {
	h := History{Revisions: []Revision{{Number: 1, Status: Deployed}, {Number: 2, Status: Deployed}, {Number: 3, Status: Failed}, {Number: 4, Status: Failed}}}
	set := rollout.NewSet("shop", "ns")
	tests := []struct {
		n, want int
		err     string
	}{
		{0, 2, ""},
		{1, 1, ""},
		{3, 0, "revision 3 of toa-shop is a failed apply"},
	}
	for _, tt := range tests {
		r, err := h.Pick(set, tt.n)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("Pick(%d) = %v, want %q", tt.n, err, tt.err)
			}
			continue
		}
		if err != nil || r.Number != tt.want {
			t.Errorf("Pick(%d) = %d, %v; want %d", tt.n, r.Number, err, tt.want)
		}
	}
	if r, ok := h.LatestDeployed(); !ok || r.Number != 2 {
		t.Errorf("LatestDeployed = %d, %v; want 2", r.Number, ok)
	}
}

// A Secret shaped like a revision that toa-apply did not record, or one changed since, is
// skipped with its reason, and refused by a rollback; a number it took is not taken again.
func TestForgedRevisions(t *testing.T) {
	k := clustertest.New()
	set := rollout.NewSet("shop", "ns")
	objects := []*unstructured.Unstructured{configMap("c", nil)}
	if _, err := rollout.Apply(bg, k, objects, rollout.Options{Namespace: "ns"}); err != nil {
		t.Fatal(err)
	}
	if _, err := Record(bg, k, set, objects, RecordOptions{Description: "apply"}); err != nil {
		t.Fatal(err)
	}
	forge(t, k, set, 2, gzipped(t, `[{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"evil"}}]`))
	// revision 1, changed after it was recorded
	s, err := k.Dynamic.Resource(secrets).Namespace("ns").Get(bg, "toa-shop.v1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_ = unstructured.SetNestedField(s.Object, gzipped(t, `[]`), "data", revisionKey)
	if _, err := k.Dynamic.Resource(secrets).Namespace("ns").Update(bg, s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	h, err := Read(bg, k, set)
	if err != nil {
		t.Fatal(err)
	}
	if len(h.Revisions) != 0 || len(h.Skipped) != 2 || !strings.Contains(h.Skipped[0].Reason, "does not match the digest") ||
		!strings.Contains(h.Skipped[1].Reason, "holds no digest of revision 2") {
		t.Errorf("history of forged revisions: %+v", h)
	}
	if _, _, err := Load(bg, k, set, 2); err == nil || !strings.Contains(err.Error(), "not a revision toa-apply recorded") {
		t.Errorf("a rollback to a forged revision: %v", err)
	}
	rev, err := Record(bg, k, set, objects, RecordOptions{Description: "apply"})
	if err != nil || rev.Number != 3 {
		t.Errorf("the revision after a forged 2: %+v, %v; want 3", rev, err)
	}

	// a Secret of the next revision's name that the listing does not see (no labels): created,
	// never overwritten
	unlabelled := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Secret",
		"metadata": map[string]any{"name": "toa-shop.v4", "namespace": "ns"}, "data": map[string]any{"x": "eA=="}}}
	if _, err := k.Dynamic.Resource(secrets).Namespace("ns").Create(bg, unlabelled, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := Record(bg, k, set, objects, RecordOptions{Description: "apply"}); err == nil ||
		!strings.Contains(err.Error(), "secret/toa-shop.v4 already exists") || !strings.Contains(err.Error(), "nothing was overwritten") {
		t.Errorf("a revision whose Secret exists: %v", err)
	}
	if s, _ := k.Dynamic.Resource(secrets).Namespace("ns").Get(bg, "toa-shop.v4", metav1.GetOptions{}); s == nil || s.Object["data"].(map[string]any)["x"] != "eA==" {
		t.Errorf("the Secret in the way was changed: %v", s)
	}
}

func forge(t *testing.T, k *cluster.Client, set rollout.Set, n int, data string) {
	t.Helper()
	s := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Secret", "type": revisionType,
		"metadata": map[string]any{"name": fmt.Sprintf("%s.v%d", set.Name, n), "namespace": set.Namespace,
			"labels": map[string]any{LabelRevisionOf: set.Name, LabelRevision: fmt.Sprint(n)}},
		"data": map[string]any{revisionKey: data}}}
	if _, err := k.Dynamic.Resource(secrets).Namespace(set.Namespace).Create(bg, s, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func gzipped(t *testing.T, text string) string {
	var b bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&b, gzip.BestSpeed)
	_, _ = zw.Write([]byte(text))
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return base64.StdEncoding.EncodeToString(b.Bytes())
}

func TestRevisionBounds(t *testing.T) {
	big := make(map[string]any)
	r := rand.New(rand.NewPCG(3, 4))
	for i := range 4000 {
		b := make([]byte, 600)
		for j := range b {
			b[j] = byte('a' + r.IntN(26))
		}
		big[fmt.Sprint(i)] = string(b)
	}
	if _, err := pack([]*unstructured.Unstructured{configMap("big", big)}); err == nil || !strings.Contains(err.Error(), "more than a Secret holds") {
		t.Errorf("a revision larger than a Secret: %v", err)
	}
	bomb := func(n int) string { return "[" + strings.Repeat("{},", n) + "{}]" }
	tests := []struct {
		name, encoded, err string
	}{
		{"not gzip", "bm90IGd6aXA=", "gzip"},
		{"too many objects", gzipped(t, bomb(maxObjects+1)), "more than 10000 objects"},
		{"64 MiB of {},", gzipped(t, bomb((64<<20)/3-1)), "more than 10000 objects"},
		{"too many values", gzipped(t, `[{"a":[`+strings.Repeat("1,", maxValues)+`1]}]`), "more than 1048576 JSON values"},
		{"too deep", gzipped(t, "["+strings.Repeat("[", maxDepth+1)+strings.Repeat("]", maxDepth+1)+"]"), "deeper than 100"},
		{"too large expanded", gzipped(t, `[{"a":"`+strings.Repeat("x", maxExpanded)+`"}]`), "expands to more than 64 MiB"},
		{"too large", strings.Repeat("A", maxEncoded+4), "more than a revision holds"},
		{"a null object", gzipped(t, `[null]`), "null"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := unpack(tt.encoded); err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("unpack: %v, want %q", err, tt.err)
			}
		})
	}
	good, err := pack([]*unstructured.Unstructured{configMap("c", map[string]any{"a": "1"})})
	if err != nil {
		t.Fatal(err)
	}
	if objs, err := unpack(good); err != nil || len(objs) != 1 || objs[0].GetName() != "c" {
		t.Errorf("unpack(pack) = %v, %v", objs, err)
	}
}
