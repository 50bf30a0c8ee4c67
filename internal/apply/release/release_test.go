package release

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/toa-deploy/toa-deploy/internal/apply/revision"
	"github.com/toa-deploy/toa-deploy/internal/fault"
	"github.com/toa-deploy/toa-deploy/rollout"
	"github.com/toa-deploy/toa-deploy/rollout/status"
)

// fakeSteps play the cluster for the conductor: each move is written down, and the test says
// which fail.
type fakeSteps struct {
	calls     []string
	history   []revision.Revision
	apps      []string // the namespace's applications
	checkErr  error
	lockErr   error
	applyErrs []error // one per Apply, in order; nil when none is left
	waitErrs  []error
}

func (f *fakeSteps) call(format string, args ...any) {
	f.calls = append(f.calls, fmt.Sprintf(format, args...))
}

func (f *fakeSteps) CheckNamespaces(context.Context, ...string) error {
	f.call("check")
	return f.checkErr
}

func (f *fakeSteps) Lock(context.Context, rollout.Set) (func(), error) {
	f.call("lock")
	if f.lockErr != nil {
		return nil, f.lockErr
	}
	return func() { f.call("unlock") }, nil
}

func (f *fakeSteps) Apply(_ context.Context, objects []*unstructured.Unstructured, opts rollout.Options) (*rollout.Result, error) {
	how := ""
	if opts.OnlyOwn {
		how = " only own"
	}
	if opts.DryRun {
		how += " dry run"
	}
	f.call("apply %s%s", objects[0].GetName(), how)
	var err error
	if len(f.applyErrs) > 0 {
		err, f.applyErrs = f.applyErrs[0], f.applyErrs[1:]
	}
	return &rollout.Result{Set: rollout.NewSet("shop", opts.Namespace)}, err
}

func (f *fakeSteps) Wait(context.Context, *rollout.Result) error {
	f.call("wait")
	var err error
	if len(f.waitErrs) > 0 {
		err, f.waitErrs = f.waitErrs[0], f.waitErrs[1:]
	}
	return err
}

func (f *fakeSteps) Delete(context.Context, []*unstructured.Unstructured, rollout.Options) (*rollout.Result, error) {
	f.call("delete")
	return &rollout.Result{}, nil
}

func (f *fakeSteps) DeleteRevisions(context.Context, rollout.Set) error {
	f.call("delete revisions")
	return nil
}

func (f *fakeSteps) History(context.Context, rollout.Set) (revision.History, error) {
	return revision.History{Revisions: slices.Clone(f.history)}, nil
}

func (f *fakeSteps) Applications(context.Context, string) ([]string, error) {
	f.call("list applications")
	return f.apps, nil
}

func (f *fakeSteps) Objects(rev revision.Revision) ([]*unstructured.Unstructured, error) {
	return []*unstructured.Unstructured{object(rev.Description)}, nil
}

func (f *fakeSteps) Record(_ context.Context, _ rollout.Set, objects []*unstructured.Unstructured, opts revision.RecordOptions) (revision.Revision, error) {
	r := revision.Revision{Number: len(f.history) + 1, Status: opts.Status, Description: opts.Description}
	f.call("record %d %s %q", r.Number, r.Status, r.Description)
	r.Description = objects[0].GetName() // what Objects gives back
	f.history = append(f.history, r)
	return r, nil
}

func object(name string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": name, "labels": map[string]any{rollout.LabelContext: "shop"}}}}
}

var deployed = []revision.Revision{{Number: 1, Status: revision.Deployed, Description: "old"}}

func TestRelease(t *testing.T) {
	crash := &status.Failure{Deployment: "composition-a", Pod: "p", Container: "c", Reason: "CrashLoopBackOff"}
	partly := &rollout.PartlyAppliedError{Applied: 1, Total: 2, NotApplied: []rollout.Ref{{Kind: "Service", Name: "s"}},
		Err: fault.BadInput(errors.New("apply service/s: invalid"))}
	held := &HeldError{Set: rollout.NewSet("shop", "ns"), Holder: "toa-apply on ci-7, pid 12", Since: time.Now(), Renewed: time.Now()}
	tests := []struct {
		name     string
		steps    fakeSteps
		rollback bool // --rollback-on-failure
		dryRun   bool
		objects  int // how many the kustomization has; 1 when 0
		calls    []string
		code     fault.Class // with words: the run fails
		words    []string
	}{
		{name: "rolled out", steps: fakeSteps{history: deployed},
			calls: []string{"check", "lock", "check", "apply new", "wait", `record 2 deployed "apply"`, "unlock"}},
		{name: "a failed rollout is a failed revision", steps: fakeSteps{history: deployed, waitErrs: []error{crash}},
			calls: []string{"check", "lock", "check", "apply new", "wait", `record 2 failed "apply"`, "unlock"},
			code:  fault.ClassFailed, words: []string{"rollout failed", "CrashLoopBackOff"}},
		{name: "a failed rollout rolled back to the latest deployed", rollback: true,
			steps: fakeSteps{history: append(slices.Clone(deployed), revision.Revision{Number: 2, Status: revision.Failed, Description: "broken"}), waitErrs: []error{crash}},
			calls: []string{"check", "lock", "check", "apply new", "wait", `record 3 failed "apply"`,
				"apply old only own", "wait", `record 4 deployed "rollback to 1 after a failed apply"`, "unlock"},
			code: fault.ClassFailed, words: []string{"CrashLoopBackOff", "rolled back to revision 1"}},
		{name: "a partial apply rolled back", rollback: true, steps: fakeSteps{history: deployed, applyErrs: []error{partly}},
			calls: []string{"check", "lock", "check", "apply new", `record 2 failed "apply"`, "apply old only own", "wait",
				`record 3 deployed "rollback to 1 after a failed apply"`, "unlock"},
			code: fault.ClassInput, words: []string{"partly applied", "rolled back to revision 1"}},
		{name: "a refusal that applied nothing is not a revision", rollback: true,
			steps: fakeSteps{history: deployed, applyErrs: []error{fault.BadInput(errors.New("no label"))}},
			calls: []string{"check", "lock", "check", "apply new", "unlock"}, code: fault.ClassInput, words: []string{"no label"}},
		{name: "no deployed revision to go back to", rollback: true, steps: fakeSteps{waitErrs: []error{crash}},
			calls: []string{"check", "lock", "check", "apply new", "wait", `record 1 failed "apply"`, "unlock"},
			code:  fault.ClassFailed, words: []string{"no deployed revision to roll back to"}},
		{name: "the rollback fails too", rollback: true, steps: fakeSteps{history: deployed, waitErrs: []error{crash, crash}},
			calls: []string{"check", "lock", "check", "apply new", "wait", `record 2 failed "apply"`, "apply old only own", "wait", "unlock"},
			code:  fault.ClassFailed, words: []string{"the rollback to revision 1 did not finish"}},
		{name: "another run holds the lease", steps: fakeSteps{lockErr: held},
			calls: []string{"check", "lock"}, code: fault.ClassFailed, words: []string{"toa-apply on ci-7, pid 12 holds the lease toa-shop since"}},
		{name: "a namespace being deleted", steps: fakeSteps{checkErr: &rollout.TerminatingError{Namespace: "ns"}},
			calls: []string{"check"}, code: fault.ClassFailed, words: []string{"namespace ns is being deleted", "nothing was applied"}},
		{name: "a dry run takes no lease and records nothing", dryRun: true, steps: fakeSteps{history: deployed},
			calls: []string{"apply new dry run"}},
		{name: "an application too large to record is refused before anything is applied", objects: 10001, steps: fakeSteps{history: deployed},
			calls: []string{"check", "lock", "unlock"}, code: fault.ClassInput, words: []string{"10001 objects, more than a revision holds (10000)"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			steps := tt.steps
			r := &Release{Steps: &steps, Options: Options{ApplyOptions: rollout.Options{Namespace: "ns", DryRun: tt.dryRun},
				Timeout: time.Minute, RollbackOnFailure: tt.rollback}}
			objects := []*unstructured.Unstructured{object("new")}
			for len(objects) < tt.objects {
				objects = append(objects, object(fmt.Sprintf("new-%d", len(objects))))
			}
			_, err := r.Apply(context.Background(), objects)
			if !slices.Equal(steps.calls, tt.calls) {
				t.Errorf("calls:\n  %s\nwant\n  %s", strings.Join(steps.calls, "\n  "), strings.Join(tt.calls, "\n  "))
			}
			if len(tt.words) == 0 {
				if err != nil {
					t.Errorf("error %v", err)
				}
				return
			}
			if fault.ClassOf(err) != tt.code {
				t.Errorf("class %d of %v, want %d", fault.ClassOf(err), err, tt.code)
			}
			for _, w := range tt.words {
				if !strings.Contains(fmt.Sprint(err), w) {
					t.Errorf("%v\ndoes not say %q", err, w)
				}
			}
		})
	}
}

// An explicit rollback applies only what the application holds, and never goes to a failed
// revision; delete takes the lease and deletes the revisions after the application.
func TestRollbackAndDelete(t *testing.T) {
	steps := &fakeSteps{history: []revision.Revision{{Number: 1, Status: revision.Deployed, Description: "one"},
		{Number: 2, Status: revision.Failed, Description: "two"}, {Number: 3, Status: revision.Deployed, Description: "three"}}}
	r := &Release{Steps: steps, Options: Options{ApplyOptions: rollout.Options{Namespace: "ns"}, Timeout: time.Minute}}
	set := rollout.NewSet("shop", "ns")
	if _, err := r.Rollback(context.Background(), set, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Rollback(context.Background(), set, 2); err == nil || !strings.Contains(err.Error(), "revision 2 of toa-shop is a failed apply") {
		t.Errorf("a rollback to a failed revision: %v", err)
	}
	if _, err := r.Delete(context.Background(), []*unstructured.Unstructured{object("one")}); err != nil {
		t.Fatal(err)
	}
	want := []string{"check", "lock", "check", "apply one only own", "wait", `record 4 deployed "rollback to 1"`, "unlock",
		"check", "lock", "unlock", "lock", "delete", "delete revisions", "unlock"}
	if !slices.Equal(steps.calls, want) {
		t.Errorf("calls:\n  %s\nwant\n  %s", strings.Join(steps.calls, "\n  "), strings.Join(want, "\n  "))
	}
}
