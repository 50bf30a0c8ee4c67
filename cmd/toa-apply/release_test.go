package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/toa-deploy/toa-deploy/internal/apply/revision"
	"github.com/toa-deploy/toa-deploy/internal/cli"
	"github.com/toa-deploy/toa-deploy/internal/harness"
	"github.com/toa-deploy/toa-deploy/rollout/status"
)

// withoutService is a kustomization like kustomization's, without its Service.
func withoutService(t *testing.T, tag string) string {
	dir := kustomization(t, tag, "")
	path := filepath.Join(dir, "app.yaml")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	deployment, _, _ := strings.Cut(string(data), "---\n")
	if err := os.WriteFile(path, []byte(deployment), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// Helm's release features on the local control plane (issue 16's "Done when"): three applies
// make three revisions; --rollback brings the first one's image back with the replaced pods gone;
// --diff shows the changed image and a pruned Service, exit 1, and exit 0 right after an apply;
// a crash-looping rollout with --rollback-on-failure ends on the previous ReplicaSet's pods,
// ready, with exit 1.
func TestRelease(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the local control plane")
	}
	kubeconfig := harness.Kubeconfig(t)
	ns := harness.Namespace(t, kubeconfig)
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cs := kubernetes.NewForConfigOrDie(cfg)
	log := cli.Logger(io.Discard, false)
	run := func(change func(c *applyCommand)) (string, error) {
		var out bytes.Buffer
		c := &applyCommand{DryRun: "none", HistoryMax: 10, Timeout: time.Minute, RequestTimeout: 10 * time.Second, Prune: true,
			Kubeconfig: kubeconfig, Namespace: ns, Output: cli.Text, out: &out}
		change(c)
		err := c.Run(context.Background(), log)
		return out.String(), err
	}
	apply := func(dir string) {
		t.Helper()
		if out, err := run(func(c *applyCommand) { c.Dir = dir }); err != nil {
			t.Fatalf("toa-apply %s: %v\n%s", dir, err, out)
		}
	}
	// the pods of the Deployment: all running image, Ready, none terminating
	settled := func(image string) {
		t.Helper()
		pods, err := cs.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: "toa/composition=carts"})
		if err != nil {
			t.Fatal(err)
		}
		if len(pods.Items) != 2 {
			t.Errorf("%d pods, want 2", len(pods.Items))
		}
		for _, p := range pods.Items {
			ready := false
			for _, c := range p.Status.Conditions {
				ready = ready || (c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue)
			}
			if p.DeletionTimestamp != nil || !ready || p.Spec.Containers[0].Image != image {
				t.Errorf("pod %s: image %s, ready %v, terminating %v; want %s, ready", p.Name, p.Spec.Containers[0].Image, ready, p.DeletionTimestamp != nil, image)
			}
		}
	}

	for _, tag := range []string{"v1", "v2", "v3"} {
		apply(kustomization(t, tag, ""))
	}
	out, err := run(func(c *applyCommand) { c.History, c.Name, c.Output = true, "demo", cli.JSON })
	if err != nil {
		t.Fatal(err)
	}
	var revs []revision.Revision
	if err := json.Unmarshal([]byte(out), &revs); err != nil {
		t.Fatalf("--history -o json: %v\n%s", err, out)
	}
	if len(revs) != 3 {
		t.Fatalf("--history: %d revisions, want 3:\n%s", len(revs), out)
	}
	for i, r := range revs {
		want := fmt.Sprintf("registry.local/demo/carts:v%d", i+1)
		if r.Number != i+1 || r.Description != "apply" || len(r.Images) != 1 || r.Images[0] != want || r.Objects != 2 {
			t.Errorf("revision %d: %+v, want %s", i+1, r, want)
		}
	}
	out, _ = run(func(c *applyCommand) { c.History, c.Name = true, "demo" })
	t.Logf("toa-apply --history:\n%s", out)

	// the application found without --name: the only one in the namespace
	start := time.Now()
	if out, err := run(func(c *applyCommand) { c.Rollback, c.Dir = true, "1" }); err != nil {
		t.Fatalf("--rollback 1: %v\n%s", err, out)
	}
	t.Logf("--rollback 1 took %s", time.Since(start).Round(time.Millisecond))
	settled("registry.local/demo/carts:v1")
	out, _ = run(func(c *applyCommand) { c.History, c.Name, c.Output = true, "demo", cli.JSON })
	revs = nil
	_ = json.Unmarshal([]byte(out), &revs)
	if len(revs) != 4 || revs[3].Description != "rollback to 1" {
		t.Errorf("after --rollback 1: %+v", revs)
	}

	// --diff: the image changed, the Service pruned
	out, err = run(func(c *applyCommand) { c.Diff, c.Dir = true, withoutService(t, "v4") })
	t.Logf("--diff: exit %d\n%s", cli.ExitCode(err), out)
	if cli.ExitCode(err) != 1 {
		t.Errorf("--diff with differences: exit %d (%v), want 1", cli.ExitCode(err), err)
	}
	for _, part := range []string{"-      - image: registry.local/demo/carts:v1", "+      - image: registry.local/demo/carts:v4",
		"--- LIVE/v1.Service." + ns + ".carts", "-kind: Service"} {
		if !strings.Contains(out, part) {
			t.Errorf("--diff does not show %q", part)
		}
	}
	// the same through the program KUBECTL_EXTERNAL_DIFF names, as kubectl diff runs it
	t.Setenv(externalDiffEnv, "diff -u -N")
	out, err = run(func(c *applyCommand) { c.Diff, c.Dir = true, withoutService(t, "v4") })
	t.Logf("--diff with %s: exit %d\n%s", externalDiffEnv, cli.ExitCode(err), out)
	if cli.ExitCode(err) != 1 {
		t.Errorf("--diff with %s: exit %d (%v), want 1", externalDiffEnv, cli.ExitCode(err), err)
	}
	for _, part := range []string{"-      - image: registry.local/demo/carts:v1", "+      - image: registry.local/demo/carts:v4",
		"/LIVE/v1.Service." + ns + ".carts", "-kind: Service"} {
		if !strings.Contains(out, part) {
			t.Errorf("--diff with %s does not show %q", externalDiffEnv, part)
		}
	}
	os.Unsetenv(externalDiffEnv)

	same := kustomization(t, "v1", "")
	apply(same)
	out, err = run(func(c *applyCommand) { c.Diff, c.Dir = true, same })
	if err != nil || out != "" {
		t.Errorf("--diff right after an apply: exit %d (%v)\n%s", cli.ExitCode(err), err, out)
	}

	// a crash loop, rolled back
	out, err = run(func(c *applyCommand) {
		c.Dir, c.RollbackOnFail, c.Output = kustomization(t, "v5", ", toa-test/fail: crashloop"), true, cli.JSON
	})
	t.Logf("--rollback-on-failure: exit %d: %v", cli.ExitCode(err), err)
	if cli.ExitCode(err) != cli.ExitFailed || !strings.Contains(fmt.Sprint(err), "CrashLoopBackOff") ||
		!strings.Contains(fmt.Sprint(err), "rolled back to revision 5") {
		t.Errorf("--rollback-on-failure: exit %d, %v; want 1, the crash loop and the rollback", cli.ExitCode(err), err)
	}
	var result struct {
		Rollout  struct{ Failure *status.Failure }
		Revision revision.Revision // the failed apply's, marked so
		Rollback struct {
			To   int
			Done bool
		}
	}
	if err := json.Unmarshal([]byte(out), &result); err != nil {
		t.Fatalf("-o json: %v\n%s", err, out)
	}
	if f := result.Rollout.Failure; f == nil || len(f.Pods) != 1 || len(f.Pods[0].Events) == 0 || f.Pods[0].Containers[0].LastState == nil {
		t.Errorf("-o json: the failure is not explained: %+v", result.Rollout.Failure)
	}
	if result.Revision.Number != 6 || result.Revision.Status != revision.Failed {
		t.Errorf("-o json: the failed apply's revision %+v, want 6, failed", result.Revision)
	}
	if !result.Rollback.Done || result.Rollback.To != 5 {
		t.Errorf("-o json: rollback %+v, want done to 5", result.Rollback)
	}
	settled("registry.local/demo/carts:v1")

	// an apply the API server refuses part-way (a new ConfigMap taken, then an invalid Service),
	// rolled back: the ConfigMap is pruned, the pods are v1's
	partial := kustomization(t, "v6", "")
	app := filepath.Join(partial, "app.yaml")
	data, err := os.ReadFile(app)
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Replace(string(data), "ports: [{port: 3000}]", "ports: [{port: 99999}]", 1) +
		"---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: carts-extra}\ndata: {a: '1'}\n"
	if err := os.WriteFile(app, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = run(func(c *applyCommand) { c.Dir, c.RollbackOnFail = partial, true })
	t.Logf("--rollback-on-failure after a partial apply: exit %d: %v", cli.ExitCode(err), err)
	// revision 6 is the crash loop's, failed, and 7 its rollback: the latest deployed is 7
	if cli.ExitCode(err) != cli.ExitBadInput || !strings.Contains(fmt.Sprint(err), "partly applied: 1 of 3 objects applied") ||
		!strings.Contains(fmt.Sprint(err), "rolled back to revision 7") {
		t.Errorf("--rollback-on-failure after a partial apply: exit %d, %v; want 2, partly applied, rolled back to 7", cli.ExitCode(err), err)
	}
	if _, err := cs.CoreV1().ConfigMaps(ns).Get(context.Background(), "carts-extra", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the partial apply's ConfigMap after the rollback: %v, want it pruned", err)
	}
	settled("registry.local/demo/carts:v1")

	// the failed applies are revisions too, marked failed (issue 25): Helm records failed releases
	out, _ = run(func(c *applyCommand) { c.History, c.Name, c.Output = true, "demo", cli.JSON })
	revs = nil
	_ = json.Unmarshal([]byte(out), &revs)
	var statuses []string
	for _, r := range revs {
		statuses = append(statuses, fmt.Sprintf("%d %s %s", r.Number, r.Status, r.Description))
	}
	want := []string{"1 deployed apply", "2 deployed apply", "3 deployed apply", "4 deployed rollback to 1", "5 deployed apply",
		"6 failed apply", "7 deployed rollback to 5 after a failed apply", "8 failed apply", "9 deployed rollback to 7 after a failed apply"}
	if strings.Join(statuses, "; ") != strings.Join(want, "; ") {
		t.Errorf("--history:\n  %s\nwant\n  %s", strings.Join(statuses, "\n  "), strings.Join(want, "\n  "))
	}
	out, _ = run(func(c *applyCommand) { c.History, c.Name = true, "demo" })
	t.Logf("toa-apply --history:\n%s", out)
}
