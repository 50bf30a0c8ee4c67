package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"

	"github.com/toa-deploy/toa-deploy/internal/apply/revision"
	"github.com/toa-deploy/toa-deploy/internal/cluster"
	"github.com/toa-deploy/toa-deploy/internal/harness"
	"github.com/toa-deploy/toa-deploy/rollout"
)

// The hostile inputs of issue 26's cluster side, through the toa-apply binary: each run's exit
// code, words, time and peak memory (its maximum resident set) are asserted.

// maxPeak is the memory a run may take, whatever it is fed.
const maxPeak = 300 << 20

// ran is how a run of the binary ended.
type ran struct {
	code           int
	stdout, stderr string
	took           time.Duration
	peak           int64 // bytes
}

func (r ran) String() string {
	return fmt.Sprintf("exit %d after %s, peak %d MiB\n%s%s", r.code, r.took.Round(time.Millisecond), r.peak>>20, r.stdout, r.stderr)
}

// launchEnv makes the test binary a launcher: it runs the command its arguments name and writes
// the command's peak memory to the file the variable names. Linux counts in a process's peak the
// memory of the process that forked it (exec records the mm it replaces, and os/exec forks with
// the parent's mm), so a toa-apply forked by this test, which holds the inputs it forges, would
// be charged for them; forked by a fresh launcher, it is charged at most the launcher's own
// few MiB.
const launchEnv = "TOA_APPLY_TEST_PEAK_FILE"

func init() {
	file := os.Getenv(launchEnv)
	if file == "" {
		return
	}
	cmd := exec.Command(os.Args[1], os.Args[2:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, launchEnv+"=") })
	err := cmd.Run()
	if _, ok := err.(*exec.ExitError); err != nil && !ok {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(125)
	}
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		_ = os.WriteFile(file, []byte(strconv.FormatInt(ru.Maxrss<<10, 10)), 0o644) // KiB on Linux
	}
	os.Exit(cmd.ProcessState.ExitCode())
}

func toaApply(t *testing.T, args ...string) ran {
	t.Helper()
	return launch(t, []string{binary(t)}, args...)
}

// memoryCap is the address space toaApplyCapped gives toa-apply (prlimit --as): a run that reads
// what it should not fails inside it instead of taking the machine's memory.
const memoryCap = 3 << 30

// toaApplyCapped is toaApply under memoryCap.
func toaApplyCapped(t *testing.T, args ...string) ran {
	t.Helper()
	return launch(t, []string{"prlimit", fmt.Sprintf("--as=%d", memoryCap), "--", binary(t)}, args...)
}

// launch runs the command (toa-apply, or what runs it) with args through the launcher.
func launch(t *testing.T, command []string, args ...string) ran {
	t.Helper()
	peakFile := filepath.Join(t.TempDir(), "peak")
	cmd := exec.Command(os.Args[0], append(command, args...)...)
	cmd.Env = append(os.Environ(), "CI=true", launchEnv+"="+peakFile)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	r := ran{code: cmd.ProcessState.ExitCode(), stdout: stdout.String(), stderr: stderr.String(), took: time.Since(start)}
	if _, ok := err.(*exec.ExitError); err != nil && !ok || r.code == 125 {
		t.Fatalf("toa-apply %s: %v\n%s", strings.Join(args, " "), err, r.stderr)
	}
	data, err := os.ReadFile(peakFile)
	if err != nil {
		t.Fatalf("toa-apply's peak memory: %v", err)
	}
	if r.peak, err = strconv.ParseInt(string(data), 10, 64); err != nil {
		t.Fatal(err)
	}
	return r
}

func (r ran) check(t *testing.T, what string, code int, maxTook time.Duration, words ...string) {
	t.Helper()
	t.Logf("%s: %s", what, r)
	if r.code != code {
		t.Errorf("%s: exit %d, want %d", what, r.code, code)
	}
	if r.took > maxTook {
		t.Errorf("%s: took %s, more than %s", what, r.took, maxTook)
	}
	if r.peak > maxPeak {
		t.Errorf("%s: peak memory %d MiB, more than %d MiB", what, r.peak>>20, maxPeak>>20)
	}
	for _, w := range words {
		if !strings.Contains(r.stdout+r.stderr, w) {
			t.Errorf("%s does not say %q", what, w)
		}
	}
}

// A kustomization whose remote resource never ends: refused at 64 MiB (exit 2) in bounded time
// and memory, --render too.
func TestEndlessRemoteResource(t *testing.T) {
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		chunk := bytes.Repeat([]byte("# endless\n"), 6554)
		for r.Context().Err() == nil {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	}))
	defer server.Close()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte("resources: ["+server.URL+"/objects.yaml]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	toaApply(t, "--render", dir, "--timeout", "1m").check(t, "--render of an endless remote resource", 2, 30*time.Second,
		server.URL+"/objects.yaml is larger than the 64 MiB toa-apply reads of a remote resource")
}

// onCluster is a test's view of the control plane for the binary: a kubeconfig, a namespace,
// and clients to look with.
type onCluster struct {
	kubeconfig, ns string
	cs             kubernetes.Interface
	k              *cluster.Client
}

func newOnCluster(t *testing.T) *onCluster {
	t.Helper()
	cp := harness.OnControlPlane(t)
	return &onCluster{kubeconfig: cp.Kubeconfig, ns: cp.Namespace, cs: cp.Client.Typed, k: cp.Client}
}

func (c *onCluster) run(t *testing.T, args ...string) ran {
	t.Helper()
	return toaApply(t, append([]string{"--kubeconfig", c.kubeconfig, "-n", c.ns, "--timeout", "90s"}, args...)...)
}

func (c *onCluster) history(t *testing.T) []revision.Revision {
	t.Helper()
	r := c.run(t, "--history", "--name", "demo", "-o", "json")
	var revs []revision.Revision
	if err := json.Unmarshal([]byte(r.stdout), &revs); err != nil {
		t.Fatalf("--history -o json: %v\n%s", err, r)
	}
	return revs
}

// forge writes a Secret shaped like revision n of demo, holding data (base64 of gzip).
func (c *onCluster) forge(t *testing.T, n int, data string) {
	t.Helper()
	raw, err := base64.StdEncoding.DecodeString(data)
	if err != nil {
		t.Fatal(err)
	}
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("toa-demo.v%d", n),
		Labels: map[string]string{revision.LabelRevisionOf: "toa-demo", revision.LabelRevision: fmt.Sprint(n)}},
		Type: "toa/revision", Data: map[string][]byte{"objects.json.gz": raw}}
	if _, err := c.cs.CoreV1().Secrets(c.ns).Create(context.Background(), s, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func gzipBase64(t *testing.T, data []byte) string {
	var b bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&b, gzip.BestCompression)
	if _, err := zw.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return base64.StdEncoding.EncodeToString(b.Bytes())
}

// hostileObjects are what a forged revision holds: a binding of cluster-admin, a ConfigMap in
// another namespace, and an object of the namespace that is not the application's.
func hostileObjects(other string) []*unstructured.Unstructured {
	labels := map[string]any{rollout.LabelContext: "demo"}
	return []*unstructured.Unstructured{
		{Object: map[string]any{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
			"metadata": map[string]any{"name": "toa-forged-admin", "labels": labels},
			"roleRef":  map[string]any{"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
			"subjects": []any{map[string]any{"kind": "ServiceAccount", "name": "default", "namespace": "default"}}}},
		{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
			"metadata": map[string]any{"name": "forged", "namespace": other, "labels": labels}, "data": map[string]any{"a": "1"}}},
		{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
			"metadata": map[string]any{"name": "foreign", "labels": labels}, "data": map[string]any{"taken": "yes"}}},
	}
}

// A forged revision Secret (a cluster-admin binding, a ConfigMap in another namespace, a
// foreign object) is refused by --rollback and skipped by --rollback-on-failure; one that
// whoever can write the parent recorded is refused object by object. Nothing is created, adopted
// or pruned.
func TestForgedRevision(t *testing.T) {
	c := newOnCluster(t)
	ctx := context.Background()
	other := harness.Namespace(t, c.kubeconfig)
	foreign := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "foreign"}, Data: map[string]string{"mine": "yes"}}
	if _, err := c.cs.CoreV1().ConfigMaps(c.ns).Create(ctx, foreign, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, tag := range []string{"v1", "v2"} {
		if r := c.run(t, kustomization(t, tag, "")); r.code != 0 {
			t.Fatalf("apply %s: %s", tag, r)
		}
	}
	var list []map[string]any
	for _, o := range hostileObjects(other) {
		list = append(list, o.Object)
	}
	data, _ := json.Marshal(list)
	c.forge(t, 3, gzipBase64(t, data))

	untouched := func(what string) {
		t.Helper()
		if _, err := c.cs.RbacV1().ClusterRoleBindings().Get(ctx, "toa-forged-admin", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("%s: the forged ClusterRoleBinding: %v, want none", what, err)
			_ = c.cs.RbacV1().ClusterRoleBindings().Delete(ctx, "toa-forged-admin", metav1.DeleteOptions{})
		}
		if _, err := c.cs.CoreV1().ConfigMaps(other).Get(ctx, "forged", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("%s: the ConfigMap in namespace %s: %v, want none", what, other, err)
		}
		cm, err := c.cs.CoreV1().ConfigMaps(c.ns).Get(ctx, "foreign", metav1.GetOptions{})
		if err != nil || cm.Data["mine"] != "yes" || cm.Data["taken"] != "" || cm.Labels[rollout.LabelPartOf] != "" {
			t.Errorf("%s: the foreign ConfigMap: %+v, %v; want it as it was", what, cm, err)
		}
		if _, err := c.cs.AppsV1().Deployments(c.ns).Get(ctx, "composition-carts", metav1.GetOptions{}); err != nil {
			t.Errorf("%s: the application's Deployment: %v, want it kept", what, err)
		}
	}

	c.run(t, "--rollback", "3").check(t, "--rollback 3 to a forged revision", 1, time.Minute,
		"secret/toa-demo.v3 is not a revision toa-apply recorded")
	untouched("--rollback 3")
	r := c.run(t, "--history", "--name", "demo")
	r.check(t, "--history", 0, time.Minute, "secret/toa-demo.v3 is skipped")
	if strings.Contains(r.stdout, "\n3 ") {
		t.Errorf("--history lists the forged revision:\n%s", r.stdout)
	}
	c.run(t, kustomization(t, "v4", ", toa-test/fail: crashloop"), "--rollback-on-failure").check(t,
		"--rollback-on-failure beside a forged revision", 1, 2*time.Minute, "CrashLoopBackOff", "rolled back to revision 2")
	untouched("--rollback-on-failure")

	// whoever can write the parent too can bind what they like: the rollback still refuses what
	// the application does not hold
	rev, err := revision.Record(ctx, c.k, rollout.NewSet("demo", c.ns), hostileObjects(other), revision.RecordOptions{Description: "apply", Version: "forger"})
	if err != nil {
		t.Fatal(err)
	}
	c.run(t, "--rollback", fmt.Sprint(rev.Number)).check(t, "--rollback to a bound hostile revision", 1, time.Minute,
		"clusterrolebinding.rbac.authorization.k8s.io/toa-forged-admin: cluster-scoped", "configmap/forged: in namespace "+other,
		"configmap/foreign: exists and is not a member", "nothing was applied")
	untouched("--rollback to a bound hostile revision")
}

// A revision Secret whose gzip expands to 64 MiB of `[{},{},...]`: --history and the next apply
// are fine, in bounded memory.
func TestRevisionBomb(t *testing.T) {
	c := newOnCluster(t)
	if r := c.run(t, kustomization(t, "v1", "")); r.code != 0 {
		t.Fatalf("apply: %s", r)
	}
	bomb := append([]byte{'['}, bytes.Repeat([]byte("{},"), (64<<20)/3)...)
	bomb[len(bomb)-1] = ']'
	data := gzipBase64(t, bomb)
	t.Logf("the bomb: %d KiB stored, %d MiB expanded", len(data)>>10, len(bomb)>>20)
	c.forge(t, 2, data)
	c.run(t, "--history", "--name", "demo").check(t, "--history", 0, time.Minute, "secret/toa-demo.v2 is skipped")
	c.run(t, kustomization(t, "v2", "")).check(t, "the next apply", 0, 2*time.Minute, "revision 3 recorded")
	revs := c.history(t)
	if len(revs) != 2 || revs[0].Number != 1 || revs[1].Number != 3 {
		t.Errorf("history after the bomb: %+v, want 1 and 3", revs)
	}
}

// Two applies of one application at once: one fails at once naming the holder, nothing of the
// other is lost, and the history holds one revision per success.
func TestConcurrentApplies(t *testing.T) {
	c := newOnCluster(t)
	ctx := context.Background()
	successes, refusals := 0, 0
	var dirs []string
	for round := range 4 {
		// each run a tag of its own: every winner changes the Deployment
		dirs = []string{kustomization(t, fmt.Sprintf("r%d-a", round+1), ""), kustomization(t, fmt.Sprintf("r%d-b", round+1), "")}
		var wg sync.WaitGroup
		results := make([]ran, 2)
		for i := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				results[i] = c.run(t, dirs[(i+round)%2])
			}()
		}
		wg.Wait()
		for i, r := range results {
			t.Logf("round %d, run %d: %s", round+1, i+1, r)
			switch {
			case r.code == 0:
				successes++
			case r.code == 1 && strings.Contains(r.stderr, "another toa-apply is at work on toa-demo") && strings.Contains(r.stderr, "holds the lease toa-demo since"):
				refusals++
				if r.took > 20*time.Second {
					t.Errorf("round %d: the refusal took %s: it must be at once", round+1, r.took)
				}
				if strings.Contains(r.stdout, "created") || strings.Contains(r.stdout, "configured") || strings.Contains(r.stdout, "pruned") {
					t.Errorf("round %d: the refused run changed something:\n%s", round+1, r.stdout)
				}
			default:
				t.Errorf("round %d, run %d: %s", round+1, i+1, r)
			}
		}
		if results[0].code == 0 && results[1].code == 0 {
			t.Logf("round %d: the runs did not overlap", round+1)
		}
	}
	if refusals == 0 {
		t.Errorf("no run was refused in 4 rounds of two at once")
	}
	revs := c.history(t)
	if len(revs) != successes {
		t.Errorf("%d revisions for %d successful applies: %+v", len(revs), successes, revs)
	}
	for i, r := range revs {
		if r.Number != i+1 || r.Status != revision.Deployed {
			t.Errorf("revision %d: %+v", i+1, r)
		}
	}
	d, err := c.cs.AppsV1().Deployments(c.ns).Get(ctx, "composition-carts", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the Deployment after concurrent applies: %v", err)
	}
	if _, err := c.cs.CoreV1().Services(c.ns).Get(ctx, "carts", metav1.GetOptions{}); err != nil {
		t.Errorf("the Service after concurrent applies: %v", err)
	}
	if len(revs) == 0 {
		t.Fatal("no revisions")
	}
	// the cluster holds what the latest revision says
	if got, want := d.Spec.Template.Spec.Containers[0].Image, revs[len(revs)-1].Images; len(want) != 1 || got != want[0] {
		t.Errorf("the Deployment runs %s and the latest revision lists %v", got, want)
	}
	if _, err := c.cs.CoordinationV1().Leases(c.ns).Get(ctx, "toa-demo", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the lease after the runs: %v, want it released", err)
	}

	// a holder that died 31 s ago, past the lease's 30 s: taken over, with a warning
	dead, holder, seconds := metav1.NewMicroTime(time.Now().Add(-31*time.Second)), "toa-apply on a runner gone, pid 1", int32(30)
	if _, err := c.cs.CoordinationV1().Leases(c.ns).Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "toa-demo"},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &seconds, AcquireTime: &dead, RenewTime: &dead}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	c.run(t, dirs[0]).check(t, "an apply after a holder died", 0, time.Minute, "was held by "+holder, "taken over")
}

// A namespace being deleted is an error before the apply: nothing applied, no "rolled out".
func TestTerminatingNamespace(t *testing.T) {
	c := newOnCluster(t)
	ctx := context.Background()
	// a ConfigMap whose finalizer holds the namespace in Terminating until the test ends
	hold := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "hold", Finalizers: []string{"toa.test/hold"}}}
	if _, err := c.cs.CoreV1().ConfigMaps(c.ns).Create(ctx, hold, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = c.cs.CoreV1().ConfigMaps(c.ns).Patch(context.Background(), "hold", "application/merge-patch+json",
			[]byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
	})
	if err := c.cs.CoreV1().Namespaces().Delete(ctx, c.ns, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	r := c.run(t, kustomization(t, "v1", ""))
	r.check(t, "an apply to a namespace being deleted", 1, 30*time.Second, "namespace "+c.ns+" is being deleted", "nothing was applied")
	if strings.Contains(r.stdout+r.stderr, "rolled out") || strings.Contains(r.stdout, "created") {
		t.Errorf("the apply went on:\n%s", r)
	}
	if _, err := c.cs.AppsV1().Deployments(c.ns).Get(ctx, "composition-carts", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the Deployment: %v, want none", err)
	}
}

// An application larger than a revision can hold (100 ConfigMaps of 16 KiB that do not compress:
// 1.2 MiB gzipped) is refused before anything of it is applied, not applied and left unrecorded.
func TestTooLargeToRecord(t *testing.T) {
	c := newOnCluster(t)
	dir := t.TempDir()
	var docs []string
	rng := rand.New(rand.NewPCG(38, 1))
	letters := "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
	for i := range 100 {
		b := make([]byte, 16<<10)
		for j := range b {
			b[j] = letters[rng.IntN(len(letters))]
		}
		docs = append(docs, fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: big-%03d}\ndata: {blob: %s}\n", i, b))
	}
	files := map[string]string{
		"kustomization.yaml": "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [big.yaml]\nlabels:\n- pairs: {toa/context: demo}\n",
		"big.yaml":           strings.Join(docs, "---\n"),
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	r := c.run(t, dir)
	r.check(t, "an application too large to record", 2, time.Minute, "more than a Secret holds", "split the application", "nothing was applied")
	ctx := context.Background()
	if list, err := c.cs.CoreV1().ConfigMaps(c.ns).List(ctx, metav1.ListOptions{LabelSelector: "toa/context=demo"}); err != nil || len(list.Items) != 0 {
		t.Errorf("ConfigMaps applied: %d, %v; want none", len(list.Items), err)
	}
	if _, err := c.cs.CoreV1().Secrets(c.ns).Get(ctx, "toa-demo", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the ApplySet parent: %v, want none", err)
	}
}
