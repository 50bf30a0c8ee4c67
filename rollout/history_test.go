package rollout

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/toa-deploy/toa-deploy/fault"
)

func withImage(name, image string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "apps/v1", "kind": "Deployment",
		"metadata": map[string]any{"name": name, "labels": map[string]any{LabelContext: "shop"}},
		"spec": map[string]any{"template": map[string]any{"spec": map[string]any{
			"containers": []any{map[string]any{"name": "app", "image": image}}}}}}}
}

// Apply, then record revisions, list them, keep --history-max, load one back, find the
// application, and Delete: revisions and parent go with the set.
func TestRevisions(t *testing.T) {
	c := fakeClient(t)
	set := NewSet("shop", "ns")
	opts := Options{Namespace: "ns", Prune: true, Version: "v1.0.0"}
	var applied [][]*unstructured.Unstructured
	for i, image := range []string{"r/shop/a:1", "r/shop/a:2", "r/shop/a:3", "r/shop/a:4"} {
		objects := []*unstructured.Unstructured{withImage("composition-a", image), configMap("c", map[string]any{"n": image})}
		if i < 2 {
			objects = append(objects, configMap("extra", nil))
		}
		res, err := applyWith(bg, c, objects, opts)
		if err != nil {
			t.Fatalf("apply %d: %v", i+1, err)
		}
		if i == 2 && (len(res.Pruned) != 1 || res.Pruned[0].Name != "extra") {
			t.Errorf("apply 3 pruned %v, want configmap/extra", res.Pruned)
		}
		rev, err := record(bg, c, set, objects, RecordOptions{Description: "apply", Version: "v1.0.0", Max: 3}, time.Unix(int64(1e9+i), 0))
		if err != nil {
			t.Fatalf("record %d: %v", i+1, err)
		}
		if rev.Number != i+1 || rev.Secret != "toa-shop.v"+string(rune('1'+i)) {
			t.Errorf("revision %+v, want number %d", rev, i+1)
		}
		applied = append(applied, objects)
	}
	revs, err := history(bg, c, set)
	if err != nil {
		t.Fatal(err)
	}
	var numbers []int
	for _, r := range revs {
		numbers = append(numbers, r.Number)
	}
	if !slices.Equal(numbers, []int{2, 3, 4}) {
		t.Errorf("revisions %v, want the last 3 of 4", numbers)
	}
	if r := revs[2]; r.Description != "apply" || !slices.Equal(r.Images, []string{"r/shop/a:4"}) || r.Objects != 2 ||
		r.Tooling != "toa-apply/v1.0.0" || !r.Time.Equal(time.Unix(1e9+3, 0)) {
		t.Errorf("revision 4: %+v", r)
	}

	rev, objects, err := loadRevision(bg, c, set, 0)
	if err != nil || rev.Number != 3 {
		t.Fatalf("the previous revision: %+v, %v; want 3", rev, err)
	}
	if len(objects) != 2 || !slices.Equal(imagesOf(objects), []string{"r/shop/a:3"}) {
		t.Errorf("revision 3's objects: %v", objects)
	}
	if _, _, err := loadRevision(bg, c, set, 1); !errors.Is(err, ErrNoRevision) || fault.ClassOf(err) != fault.ClassInput ||
		!strings.Contains(err.Error(), "it has: 2, 3, 4") {
		t.Errorf("a revision beyond --history-max: %v", err)
	}
	if apps, err := applications(bg, c, "ns"); err != nil || !slices.Equal(apps, []string{"shop"}) {
		t.Errorf("applications = %v, %v; want shop", apps, err)
	}

	if _, err := deleteWith(bg, c, applied[3], opts); err != nil {
		t.Fatalf("delete: %v", err)
	}
	if revs, _ := history(bg, c, set); len(revs) != 0 {
		t.Errorf("%d revisions left after Delete", len(revs))
	}
	if apps, _ := applications(bg, c, "ns"); len(apps) != 0 {
		t.Errorf("applications after Delete: %v", apps)
	}
}

func TestNoPreviousRevision(t *testing.T) {
	c := fakeClient(t)
	set := NewSet("shop", "ns")
	if _, err := applyWith(bg, c, []*unstructured.Unstructured{configMap("c", nil)}, Options{Namespace: "ns"}); err != nil {
		t.Fatal(err)
	}
	if _, err := record(bg, c, set, []*unstructured.Unstructured{configMap("c", nil)}, RecordOptions{}, time.Now()); err != nil {
		t.Fatal(err)
	}
	_, _, err := loadRevision(bg, c, set, 0)
	if !errors.Is(err, ErrNoRevision) || !strings.Contains(err.Error(), "has 1 revision recorded") {
		t.Errorf("a rollback with one revision: %v", err)
	}
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
	if _, err := packObjects([]*unstructured.Unstructured{configMap("big", big)}); err == nil || !strings.Contains(err.Error(), "more than a Secret holds") {
		t.Errorf("a revision larger than a Secret: %v", err)
	}
	s := &unstructured.Unstructured{Object: map[string]any{"data": map[string]any{revisionKey: "bm90IGd6aXA="}}}
	if _, err := unpack(s); err == nil {
		t.Error("a revision that is not gzip was read")
	}
}

// A dry run's Diffs: the changed image, and what prune would delete; nothing changes.
func TestDryRunDiffs(t *testing.T) {
	c := fakeClient(t)
	opts := Options{Namespace: "ns", Prune: true}
	if _, err := applyWith(bg, c, []*unstructured.Unstructured{withImage("composition-a", "r/a:1"), configMap("c", nil)}, opts); err != nil {
		t.Fatal(err)
	}
	opts.DryRun = true
	res, err := applyWith(bg, c, []*unstructured.Unstructured{withImage("composition-a", "r/a:2")}, opts)
	if err != nil {
		t.Fatal(err)
	}
	diffs, err := Diffs(res)
	if err != nil {
		t.Fatal(err)
	}
	if len(diffs) != 2 || diffs[0].Change != Configured || diffs[1].Change != Pruned ||
		!strings.Contains(diffs[0].Diff, "-      - image: r/a:1\n+      - image: r/a:2\n") || !strings.Contains(diffs[1].Diff, "-kind: ConfigMap") {
		t.Fatalf("diffs: %+v", diffs)
	}
	res, err = applyWith(bg, c, []*unstructured.Unstructured{withImage("composition-a", "r/a:1"), configMap("c", nil)}, opts)
	if err != nil {
		t.Fatal(err)
	}
	if diffs, _ := Diffs(res); len(diffs) != 0 {
		t.Errorf("the dry run changed something, or the same objects differ: %+v", diffs)
	}
}
