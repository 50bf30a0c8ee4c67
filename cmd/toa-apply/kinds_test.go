package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/toa-deploy/toa-deploy/internal/harness"
	"github.com/toa-deploy/toa-deploy/rollout"
	"github.com/toa-deploy/toa-deploy/rollout/status"
)

// The workloads an overlay adds beside a Toa application's Deployment (kinds_test.go writes
// them into a kustomization of its own).
const (
	statefulSetYAML = `apiVersion: apps/v1
kind: StatefulSet
metadata: {name: db}
spec:
  replicas: 2
  serviceName: db
  selector: {matchLabels: {app: db}}
  template:
    metadata: {labels: {app: db}}
    spec:
      terminationGracePeriodSeconds: 1
      containers: [{name: db, image: registry.local/demo/db}]
`
	daemonSetYAML = `apiVersion: apps/v1
kind: DaemonSet
metadata: {name: agent}
spec:
  selector: {matchLabels: {app: agent}}
  template:
    metadata: {labels: {app: agent}}
    spec:
      terminationGracePeriodSeconds: 1
      containers: [{name: agent, image: registry.local/demo/agent:v1}]
`
	// jobYAML is a Job of one pod; PODLABELS, DEADLINE and ANNOTATIONS are replaced.
	jobYAML = `apiVersion: batch/v1
kind: Job
metadata: {name: migrate}
spec:
  backoffLimit: 0DEADLINE
  template:
    metadata: {labels: {app: migratePODLABELS}ANNOTATIONS}
    spec:
      restartPolicy: Never
      containers: [{name: migrate, image: registry.local/demo/migrate:v1}]
`
)

// job is jobYAML with more pod labels, an activeDeadlineSeconds and pod annotations.
func job(podLabels, deadline, annotations string) string {
	return strings.NewReplacer("PODLABELS", podLabels, "DEADLINE", deadline, "ANNOTATIONS", annotations).Replace(jobYAML)
}

// overlay writes an overlay of the kustomization of one composition (apply_test.go's) that adds
// files, with the StatefulSet's image at tag, and returns its folder.
func overlay(t *testing.T, tag string, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	base, err := filepath.Rel(dir, kustomization(t, "v1", ""))
	if err != nil {
		t.Fatal(err)
	}
	resources := []string{base}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
		resources = append(resources, name)
	}
	k := "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [" + strings.Join(resources, ", ") + "]\n" +
		"labels:\n- pairs: {toa/context: demo}\n  includeSelectors: false\n  includeTemplates: true\n" +
		"images:\n- {name: registry.local/demo/db, newTag: " + tag + "}\n"
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// jsonRun is how a run of toa-apply ended.
type jsonRun struct {
	code   int
	took   time.Duration
	stderr string
	out    struct {
		Rollout struct {
			Done     bool             `json:"done"`
			Failure  *status.Failure  `json:"failure"`
			Awaiting []rollout.Status `json:"timedOutAwaiting"`
		} `json:"rollout"`
	}
}

// apply runs toa-apply -o json on dir in the namespace; what names the run in the test's log.
func apply(t *testing.T, what, kubeconfig, ns, dir string) jsonRun {
	t.Helper()
	cmd := exec.Command(binary(t), dir, "--kubeconfig", kubeconfig, "-n", ns, "--timeout", "90s", "-o", "json")
	cmd.Env = append(os.Environ(), "CI=true")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	r := jsonRun{took: time.Since(start), stderr: stderr.String()}
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		r.code = exit.ExitCode()
	case err != nil:
		t.Fatalf("run toa-apply: %v", err)
	}
	if err := json.Unmarshal(stdout.Bytes(), &r.out); err != nil {
		t.Fatalf("toa-apply -o json printed no document (%v):\n%s\nstderr:\n%s", err, stdout.Bytes(), r.stderr)
	}
	t.Logf("toa-apply, %s: exit %d after %s\n%s", what, r.code, r.took.Round(time.Millisecond), r.stderr)
	return r
}

// Issue 22: an overlay that adds a StatefulSet, a DaemonSet and a Job beside a Toa application's
// Deployment is awaited whole; a StatefulSet's image change until its pods are on the new
// revision; a Job that cannot run fails the run at once, naming its container and the reason.
func TestEveryKindAwaited(t *testing.T) {
	kubeconfig := harness.Kubeconfig(t)
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cs := kubernetes.NewForConfigOrDie(cfg)
	binary(t)

	t.Run("a StatefulSet, a DaemonSet and a Job beside the Deployment", func(t *testing.T) {
		t.Parallel()
		ns := harness.Namespace(t, kubeconfig)
		files := map[string]string{"statefulset.yaml": statefulSetYAML, "daemonset.yaml": daemonSetYAML, "job.yaml": job("", "", "")}
		r := apply(t, "first apply", kubeconfig, ns, overlay(t, "v1", files))
		if r.code != 0 || !r.out.Rollout.Done {
			t.Fatalf("exit %d, want 0:\n%s", r.code, r.stderr)
		}
		ctx := context.Background()
		j, err := cs.BatchV1().Jobs(ns).Get(ctx, "migrate", metav1.GetOptions{})
		if err != nil || j.Status.Succeeded != 1 {
			t.Errorf("the Job when toa-apply returned: %v, %+v", err, j.Status)
		}
		ds, err := cs.AppsV1().DaemonSets(ns).Get(ctx, "agent", metav1.GetOptions{})
		if err != nil || ds.Status.NumberAvailable != ds.Status.DesiredNumberScheduled || ds.Status.DesiredNumberScheduled == 0 {
			t.Errorf("the DaemonSet when toa-apply returned: %v, %+v", err, ds.Status)
		}
		for _, kind := range []string{"statefulset/db", "daemonset/agent", "job/migrate", "deployment/composition-carts"} {
			if !strings.Contains(r.stderr, kind+": ✓") {
				t.Errorf("the progress does not show %s:\n%s", kind, r.stderr)
			}
		}

		// the StatefulSet's image changes: awaited until every pod is on the new revision
		r = apply(t, "the StatefulSet's image changed", kubeconfig, ns, overlay(t, "v2", files))
		if r.code != 0 {
			t.Fatalf("the image change: exit %d, want 0:\n%s", r.code, r.stderr)
		}
		s, err := cs.AppsV1().StatefulSets(ns).Get(ctx, "db", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if s.Status.CurrentRevision != s.Status.UpdateRevision || s.Status.UpdatedReplicas != 2 || s.Status.ReadyReplicas != 2 {
			t.Errorf("the StatefulSet when toa-apply returned: %+v", s.Status)
		}
		pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=db"})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range pods.Items {
			if p.Labels["controller-revision-hash"] != s.Status.UpdateRevision || p.Spec.Containers[0].Image != "registry.local/demo/db:v2" || p.DeletionTimestamp != nil {
				t.Errorf("pod %s when toa-apply returned: revision %s, image %s, terminating %v; want %s, v2",
					p.Name, p.Labels["controller-revision-hash"], p.Spec.Containers[0].Image, p.DeletionTimestamp != nil, s.Status.UpdateRevision)
			}
		}
	})

	for _, tc := range []struct {
		name, job, reason, container string
	}{
		{"a crash-looping Job", job(", toa-test/fail: crashloop", "", ""), "CrashLoopBackOff", "migrate"},
		{"a Job whose image cannot be pulled", job(", toa-test/fail: imagepull", "", ""), "ImagePullBackOff", "migrate"},
		{"a Job past its deadline", job("", "\n  activeDeadlineSeconds: 3",
			`, annotations: {pod-complete.stage.kwok.x-k8s.io/delay: "1h"}`), "DeadlineExceeded", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ns := harness.Namespace(t, kubeconfig)
			r := apply(t, tc.name, kubeconfig, ns, overlay(t, "v1", map[string]string{"job.yaml": tc.job}))
			f := r.out.Rollout.Failure
			if r.code != 1 || f == nil {
				t.Fatalf("exit %d, failure %+v; want 1 and a failure:\n%s", r.code, f, r.stderr)
			}
			if f.Kind != "Job" || f.Name != "migrate" || f.Reason != tc.reason || f.Container != tc.container {
				t.Errorf("-o json's failure %+v, want Job migrate, container %q, %s", f, tc.container, tc.reason)
			}
			words := "job migrate: "
			if tc.container != "" {
				words += "pod " + f.Pod + ", container " + tc.container + ": "
			}
			if !strings.Contains(r.stderr, "rollout failed: "+words+tc.reason) {
				t.Errorf("the error does not say %q:\n%s", words+tc.reason, r.stderr)
			}
		})
	}

	t.Run("a custom resource with Ready and Stalled conditions", func(t *testing.T) {
		t.Parallel()
		ns := harness.Namespace(t, kubeconfig)
		testCustomResource(t, kubeconfig, ns)
	})
}

// testCustomResource applies a CRD and a Widget, then changes the Widget twice: each change is
// awaited until the test, in the controller's place, sets its status: Ready, then Stalled.
func testCustomResource(t *testing.T, kubeconfig, ns string) {
	group := ns + ".toa-test.io"
	crd := `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.` + group + `}
spec:
  group: ` + group + `
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget, listKind: WidgetList}
  versions:
  - name: v1
    served: true
    storage: true
    subresources: {status: {}}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec: {type: object, properties: {size: {type: integer}}}
          status: {type: object, x-kubernetes-preserve-unknown-fields: true}
`
	widget := func(size string) string {
		return "apiVersion: " + group + "/v1\nkind: Widget\nmetadata: {name: w}\nspec: {size: " + size + "}\n"
	}
	restCfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	dyn := dynamic.NewForConfigOrDie(restCfg)
	widgets := dyn.Resource(schema.GroupVersionResource{Group: group, Version: "v1", Resource: "widgets"}).Namespace(ns)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		crds := dyn.Resource(schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"})
		if err := crds.Delete(ctx, "widgets."+group, metav1.DeleteOptions{}); err != nil {
			t.Errorf("delete the CRD: %v", err)
		}
	})

	// a Widget without conditions is not awaited
	r := apply(t, "a Widget without conditions", kubeconfig, ns, overlay(t, "v1", map[string]string{"crd.yaml": crd, "widget.yaml": widget("1")}))
	if r.code != 0 {
		t.Fatalf("exit %d, want 0:\n%s", r.code, r.stderr)
	}
	if !strings.Contains(r.stderr, "widget."+group+"/w: ✓ no status conditions: not awaited") {
		t.Errorf("the progress does not say the Widget is not awaited:\n%s", r.stderr)
	}

	// setStatus sets the Widget's status once its generation is the one given, after a while.
	setStatus := func(generation int64, conditions ...map[string]any) chan error {
		done := make(chan error, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			for ctx.Err() == nil {
				w, err := widgets.Get(ctx, "w", metav1.GetOptions{})
				if err == nil && w.GetGeneration() == generation {
					time.Sleep(2 * time.Second) // what the wait must wait for
					list := make([]any, 0, len(conditions))
					for _, c := range conditions {
						list = append(list, c)
					}
					w.Object["status"] = map[string]any{"observedGeneration": generation, "conditions": list}
					_, err = widgets.UpdateStatus(ctx, w, metav1.UpdateOptions{})
					done <- err
					return
				}
				time.Sleep(100 * time.Millisecond)
			}
			done <- ctx.Err()
		}()
		return done
	}
	condition := func(typ, status, reason, message string) map[string]any {
		return map[string]any{"type": typ, "status": status, "reason": reason, "message": message,
			"lastTransitionTime": time.Now().UTC().Format(time.RFC3339)}
	}
	// generation 1 was reconciled: Ready
	w, err := widgets.Get(context.Background(), "w", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w.Object["status"] = map[string]any{"observedGeneration": int64(1), "conditions": []any{condition("Ready", "True", "Reconciled", "")}}
	if _, err := widgets.UpdateStatus(context.Background(), w, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	// generation 2: awaited until the status of generation 2 says Ready
	set := setStatus(2, condition("Ready", "True", "Reconciled", "size 2"))
	r = apply(t, "the Widget changed, Ready after 2s", kubeconfig, ns, overlay(t, "v1", map[string]string{"crd.yaml": crd, "widget.yaml": widget("2")}))
	if err := <-set; err != nil {
		t.Fatalf("set the status: %v", err)
	}
	if r.code != 0 || r.took < 2*time.Second {
		t.Errorf("a change of the Widget: exit %d after %s, want 0 after the status came (2s):\n%s", r.code, r.took, r.stderr)
	}
	if !strings.Contains(r.stderr, "generation 2 to be observed") || !strings.Contains(r.stderr, "ready: Reconciled: size 2") {
		t.Errorf("the progress does not show the Widget awaited, then ready:\n%s", r.stderr)
	}

	// generation 3: Stalled fails the run
	set = setStatus(3, condition("Ready", "False", "QuotaExceeded", "no room for 3"), condition("Stalled", "True", "QuotaExceeded", "no room for 3"))
	r = apply(t, "the Widget changed, Stalled after 2s", kubeconfig, ns, overlay(t, "v1", map[string]string{"crd.yaml": crd, "widget.yaml": widget("3")}))
	if err := <-set; err != nil {
		t.Fatalf("set the status: %v", err)
	}
	f := r.out.Rollout.Failure
	if r.code != 1 || f == nil || f.Kind != "Widget" || f.Group != group || f.Name != "w" || f.Reason != "QuotaExceeded" {
		t.Errorf("a stalled Widget: exit %d, failure %+v; want 1, Widget w QuotaExceeded:\n%s", r.code, f, r.stderr)
	}
	if !strings.Contains(r.stderr, "rollout failed: widget w: QuotaExceeded: no room for 3") {
		t.Errorf("the error does not name the Widget and the reason:\n%s", r.stderr)
	}
}
