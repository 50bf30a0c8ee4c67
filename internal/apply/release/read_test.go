package release

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/toa-deploy/toa-deploy/internal/apply/revision"
	"github.com/toa-deploy/toa-deploy/internal/fault"
)

// The application --history and --rollback read: --name, else the kustomization's, else the
// only one in the namespace; none or several are bad input that says what to give.
func TestApplication(t *testing.T) {
	kustomization := func(context.Context) ([]*unstructured.Unstructured, error) {
		return []*unstructured.Unstructured{object("a")}, nil
	}
	tests := []struct {
		name    string
		flag    string
		objects func(context.Context) ([]*unstructured.Unstructured, error)
		apps    []string
		want    string // the set's parent
		calls   []string
		words   string // the error says
	}{
		{name: "named", flag: "blog", objects: kustomization, want: "toa-blog"},
		{name: "the kustomization's", objects: kustomization, want: "toa-shop"},
		{name: "the only one", apps: []string{"blog"}, want: "toa-blog", calls: []string{"list applications"}},
		{name: "none", calls: []string{"list applications"}, words: "toa-apply has applied no application to namespace ns: give -n NAMESPACE or --name CONTEXT"},
		{name: "two", apps: []string{"blog", "shop"}, calls: []string{"list applications"}, words: "namespace ns has 2 applications (blog, shop): give --name CONTEXT"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			steps := &fakeSteps{apps: tt.apps}
			r := &Release{Steps: steps, Options: Options{ApplyOptions: ApplyOptions{Namespace: "ns"}, Timeout: time.Minute}}
			set, err := r.Application(context.Background(), tt.flag, tt.objects)
			if !slices.Equal(steps.calls, tt.calls) {
				t.Errorf("calls %q, want %q", steps.calls, tt.calls)
			}
			if tt.words != "" {
				if fault.ClassOf(err) != fault.ClassInput || !strings.Contains(err.Error(), tt.words) {
					t.Errorf("%v (class %d), want bad input saying %q", err, fault.ClassOf(err), tt.words)
				}
				return
			}
			if err != nil || set.Name != tt.want || set.Namespace != "ns" || set.Context() != strings.TrimPrefix(tt.want, "toa-") {
				t.Errorf("%+v, %v; want %s in ns", set, err, tt.want)
			}
		})
	}
}

// --diff is a dry run under no lease that records nothing; --diff --rollback a dry run of the
// revision, applied only where the application holds its objects, as the rollback would.
func TestDiff(t *testing.T) {
	steps := &fakeSteps{history: []revision.Revision{{Number: 1, Status: revision.Deployed, Description: "one"},
		{Number: 2, Status: revision.Deployed, Description: "two"}}}
	r := &Release{Steps: steps, Options: Options{ApplyOptions: ApplyOptions{Namespace: "ns"}, Timeout: time.Minute}}
	if _, err := r.Diff(context.Background(), []*unstructured.Unstructured{object("new")}); err != nil {
		t.Fatal(err)
	}
	set, err := r.Application(context.Background(), "shop", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.DiffRollback(context.Background(), set, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := r.DiffRollback(context.Background(), set, 3); fault.ClassOf(err) != fault.ClassInput {
		t.Errorf("a diff to revision 3 of 2: %v", err)
	}
	want := []string{"apply new dry run", "apply one only own dry run"}
	if !slices.Equal(steps.calls, want) {
		t.Errorf("calls:\n  %s\nwant\n  %s", strings.Join(steps.calls, "\n  "), strings.Join(want, "\n  "))
	}
}
