package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// Item 5: toa-apply after an image change, 3 Deployments × 4 replicas with a grace period,
// against kubectl apply --server-side, kubectl rollout status and the 289 tool's drain loop.

const (
	applyDeployments = 3
	applyReplicas    = 4
	applyGrace       = 10 // seconds; the simulated node takes a random part of it to end a pod
)

// applyKustomization writes a kustomization of three Deployments for the namespace, with image
// tag tag; the context label is what toa-apply names its inventory after.
func applyKustomization(dir, ns, context, tag string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	kust := fmt.Sprintf(`apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
namespace: %s
labels:
  - pairs:
      toa/context: %s
    includeSelectors: false
resources:
  - deployments.yaml
`, ns, context)
	var docs []string
	for i := 1; i <= applyDeployments; i++ {
		docs = append(docs, fmt.Sprintf(`apiVersion: apps/v1
kind: Deployment
metadata:
  name: composition-c%d
spec:
  progressDeadlineSeconds: 900
  replicas: %d
  selector:
    matchLabels:
      toa/composition: c%d
  strategy:
    rollingUpdate:
      maxSurge: 100%%
      maxUnavailable: 0
    type: RollingUpdate
  template:
    metadata:
      labels:
        toa/composition: c%d
    spec:
      containers:
      - name: c%d
        image: 127.0.0.1:5000/%s/composition-c%d:%s
        command: [toa, compose, c%d]
      terminationGracePeriodSeconds: %d
`, i, applyReplicas, i, i, i, context, i, tag, i, applyGrace))
	}
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(kust), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "deployments.yaml"), []byte(strings.Join(docs, "---\n")), 0o644)
}

// podClock watches a namespace's pods and records when each pod that existed at the start is
// deleted.
type podClock struct {
	mu      sync.Mutex
	old     map[string]bool
	gone    map[string]time.Time
	cancel  context.CancelFunc
	stopped chan struct{}
}

func startPodClock(ctx context.Context, cs *kubernetes.Clientset, ns string) (*podClock, error) {
	list, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	c := &podClock{old: map[string]bool{}, gone: map[string]time.Time{}, cancel: cancel, stopped: make(chan struct{})}
	for _, p := range list.Items {
		c.old[p.Name] = true
	}
	w, err := cs.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
	if err != nil {
		cancel()
		return nil, err
	}
	go func() {
		defer close(c.stopped)
		defer w.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case e, ok := <-w.ResultChan():
				if !ok {
					return
				}
				if e.Type != watch.Deleted {
					continue
				}
				if p, ok := e.Object.(*corev1.Pod); ok {
					c.mu.Lock()
					if c.old[p.Name] {
						c.gone[p.Name] = time.Now()
					}
					c.mu.Unlock()
				}
			}
		}
	}()
	return c, nil
}

// result waits up to limit for every old pod to be gone and returns when the last went and how
// many were still there at the instant at.
func (c *podClock) result(at time.Time, limit time.Duration) (last time.Time, leftAt, neverGone int) {
	deadline := time.Now().Add(limit)
	for {
		c.mu.Lock()
		done := len(c.gone) == len(c.old)
		c.mu.Unlock()
		if done || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	c.cancel()
	<-c.stopped
	c.mu.Lock()
	defer c.mu.Unlock()
	for name := range c.old {
		t, ok := c.gone[name]
		switch {
		case !ok:
			neverGone++
			leftAt++
		case t.After(at):
			leftAt++
		}
		if ok && t.After(last) {
			last = t
		}
	}
	return last, leftAt, neverGone
}

func (b *bench) apply() error {
	cache := envOr("TOA_CACHE", filepath.Join(os.Getenv("HOME"), ".cache", "toa-deploy"))
	kubeconfig := envOr("TOA_TEST_KUBECONFIG", filepath.Join(cache, "controlplane", "run", "kubeconfig"))
	kubectls, _ := filepath.Glob(filepath.Join(cache, "controlplane", "bin", "*", "kubectl"))
	if k := filepath.Join(cache, "controlplane", "bin", "kubectl"); len(kubectls) == 0 {
		if _, err := os.Stat(k); err == nil {
			kubectls = []string{k}
		}
	}
	fmt.Printf("\n### 5. Apply on the local control plane\n\n")
	if _, err := os.Stat(kubeconfig); err != nil || len(kubectls) == 0 {
		fmt.Printf("Not measured: no control plane (kubeconfig %s, kubectl under %s/controlplane/bin): run testdata/controlplane/up.sh.\n", kubeconfig, cache)
		return nil
	}
	kubectl := kubectls[len(kubectls)-1]
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	tools := []string{"toa-apply", "kubectl"}
	dirs := map[string]string{}
	nss := map[string]string{}
	for _, tool := range tools {
		short := strings.TrimSuffix(tool, "-apply")
		ns := "bench-apply-" + short
		nss[tool] = ns
		dirs[tool] = filepath.Join(b.work, "apply", short)
		// a clean namespace, and the Deployments rolled out once at tag r0 (not measured)
		exec.Command(kubectl, "--kubeconfig", kubeconfig, "delete", "namespace", ns, "--wait=true", "--timeout=120s").Run()
		if out, err := exec.Command(kubectl, "--kubeconfig", kubeconfig, "create", "namespace", ns).CombinedOutput(); err != nil {
			return fmt.Errorf("kubectl create namespace %s: %v: %s", ns, err, out)
		}
		if err := applyKustomization(dirs[tool], ns, "bench"+short, "r0"); err != nil {
			return err
		}
		if _, err := b.applyWith(tool, kubectl, kubeconfig, dirs[tool], ns, "apply-"+short+"-r0"); err != nil {
			return err
		}
	}
	var returned = map[string]series{}
	var lags = map[string][]float64{}
	var early = map[string][]int{}
	for run := 1; run <= b.runs; run++ {
		order := tools
		if run%2 == 0 {
			order = []string{tools[1], tools[0]}
		}
		for _, tool := range order {
			short := strings.TrimSuffix(tool, "-apply")
			if err := applyKustomization(dirs[tool], nss[tool], "bench"+short, fmt.Sprintf("r%d", run)); err != nil {
				return err
			}
			clock, err := startPodClock(b.ctx, cs, nss[tool])
			if err != nil {
				return err
			}
			fmt.Fprintf(os.Stderr, "bench: apply, %s, run %d\n", tool, run)
			s, err := b.applyWith(tool, kubectl, kubeconfig, dirs[tool], nss[tool], fmt.Sprintf("apply-%s-r%d", short, run))
			if err != nil {
				clock.cancel()
				return err
			}
			end := time.Now()
			last, leftAt, _ := clock.result(end, 2*time.Minute)
			returned[tool] = append(returned[tool], s)
			lags[tool] = append(lags[tool], end.Sub(last).Seconds())
			early[tool] = append(early[tool], leftAt)
		}
	}
	fmt.Printf("%d Deployments × %d replicas (RollingUpdate, maxSurge 100%%, maxUnavailable 0, terminationGracePeriodSeconds %d: "+
		"the simulated node ends a deleted pod after a random part of it), each run a new image tag. toa-apply DIR against "+
		"`kubectl apply --server-side -k DIR`, `kubectl rollout status` of each Deployment, then the 289 tool's drain loop "+
		"(`kubectl get pods` every 3 s until no pod is terminating). Lag: from the last replaced pod's deletion (a pod watch) to the "+
		"command's return. %d runs each, alternating.\n\n", applyDeployments, applyReplicas, applyGrace, b.runs)
	fmt.Println("| command | returns after (median) | lag after the last old pod (median) | lag (max) | returns with replaced pods left (runs) |")
	fmt.Println("|---|---:|---:|---:|---:|")
	for _, tool := range tools {
		name := map[string]string{"toa-apply": "toa-apply", "kubectl": "kubectl apply + rollout status + drain loop"}[tool]
		var ls series
		maxLag := 0.0
		for _, l := range lags[tool] {
			ls = append(ls, sample{wall: time.Duration(l * float64(time.Second))})
			maxLag = max(maxLag, l)
		}
		bad := 0
		for _, n := range early[tool] {
			if n > 0 {
				bad++
			}
		}
		fmt.Printf("| %s | %s | %s | %s | %d of %d |\n", name, secs(returned[tool].wall()), secs(ls.wall()), secs(maxLag), bad, len(early[tool]))
	}
	var toaLag series
	maxToa := 0.0
	for _, l := range lags["toa-apply"] {
		toaLag = append(toaLag, sample{wall: time.Duration(l * float64(time.Second))})
		maxToa = max(maxToa, l)
	}
	bad := 0
	for _, n := range early["toa-apply"] {
		bad += n
	}
	fmt.Printf("\n- toa-apply's lag after the last old pod is gone: median %s, max %s (target < 0.5 s): %s.\n", secs(toaLag.wall()), secs(maxToa), verdict(maxToa < 0.5))
	fmt.Printf("- toa-apply never returned while a replaced pod existed: %s (%d pods left at a return, over %d runs).\n", verdict(bad == 0), bad, b.runs)
	fmt.Printf("- Returns after, kubectl's way ÷ toa-apply: %s.\n", ratio(returned["kubectl"].wall(), returned["toa-apply"].wall()))
	return nil
}

// applyWith applies the kustomization with one tool and waits as that tool waits.
func (b *bench) applyWith(tool, kubectl, kubeconfig, dir, ns, log string) (sample, error) {
	switch tool {
	case "toa-apply":
		return b.measure(dir, nil, log, b.toaApply, dir, "--kubeconfig", kubeconfig, "--timeout", "5m")
	default:
		var script strings.Builder
		fmt.Fprintf(&script, "set -e\nk() { %q --kubeconfig %q -n %q \"$@\"; }\n", kubectl, kubeconfig, ns)
		fmt.Fprintf(&script, "k apply --server-side -k %q\n", dir)
		for i := 1; i <= applyDeployments; i++ {
			fmt.Fprintf(&script, "k rollout status deployment/composition-c%d --timeout 5m\n", i)
		}
		// the 289 drain: poll every 3 s until no pod with a toa/ label is terminating
		script.WriteString(`while :; do
  n=$(k get pods -o jsonpath='{range .items[*]}{.metadata.deletionTimestamp}{" "}{.metadata.labels}{"\n"}{end}' | grep -c '^[0-9].*"toa/' || true)
  [ "$n" = 0 ] && break
  sleep 3
done
`)
		return b.measure(dir, nil, log, "bash", "-c", script.String())
	}
}
