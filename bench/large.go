package main

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// Item 10 (issue 38): a large application on the local control plane, 100, 300 and 1,000
// compositions (a Deployment of 2 replicas, a Service and a ConfigMap each), by toa-apply, by
// `kubectl apply --server-side --prune --applyset` with `kubectl rollout status`, and by `helm
// upgrade --install --wait` (Helm v3 with its defaults, as Toa 289 ran it): the first apply until
// every pod is ready, a no-change apply, every image changed until the replaced pods are gone,
// and the rollback; wall time, each tool's requests in the API server's audit log, peak memory.

// helmTimeout bounds each of Helm's steps: its --wait polls every object at client-go's default
// of 5 requests a second, minutes a poll at 1,000 compositions.
var helmTimeout = envOr("BENCH_LARGE_HELM_TIMEOUT", "45m")

const (
	largeReplicas = 2
	largeGrace    = 10 // seconds; the simulated node ends a deleted pod after a random part of it
)

// largeImage is composition name's image and the digest it is pinned to at generation gen.
func largeImage(name string, gen int) (repository, digest string) {
	return "127.0.0.1:5000/large/composition-" + name, fmt.Sprintf("sha256:%x", sha256.Sum256([]byte(fmt.Sprintf("%s-%d", name, gen))))
}

// largeObjects are the objects of n compositions of one kind as toa-push writes them (env,
// probes, resources), a YAML stream; inline pins each image by digest in the object and labels
// it with the context (Helm's chart), else both are left to the kustomization, as toa-push
// leaves them.
func largeObjects(kind string, n, gen int, inline bool) string {
	var docs []string
	labels := ""
	if inline {
		labels = "\n  labels: {toa/context: large}"
	}
	for i := range n {
		name := fmt.Sprintf("c%04d", i)
		image, digest := largeImage(name, gen)
		if inline {
			image += "@" + digest
		}
		switch kind {
		case "ConfigMap":
			docs = append(docs, fmt.Sprintf(`apiVersion: v1
kind: ConfigMap
metadata:
  name: config-%[1]s%[2]s
data: {TOA_COMPONENT: large.%[1]s, LOG_LEVEL: info, CACHE_TTL: "60"}
`, name, labels))
		case "Service":
			docs = append(docs, fmt.Sprintf(`apiVersion: v1
kind: Service
metadata:
  name: large-%[1]s%[2]s
spec:
  ports: [{name: http-binding, port: 3000, protocol: TCP, targetPort: 3000}]
  selector: {toa/component-large-%[1]s: "1"}
  type: ClusterIP
`, name, labels))
		case "Deployment":
			docs = append(docs, fmt.Sprintf(`apiVersion: apps/v1
kind: Deployment
metadata:
  name: composition-%[1]s%[2]s
spec:
  progressDeadlineSeconds: 900
  replicas: %[4]d
  selector: {matchLabels: {toa/composition: %[1]s}}
  strategy: {rollingUpdate: {maxSurge: 100%%, maxUnavailable: 0}, type: RollingUpdate}
  template:
    metadata:
      labels: {toa/component-large-%[1]s: "1", toa/composition: %[1]s}
    spec:
      containers:
      - name: %[1]s
        image: %[3]s
        env:
        - {name: TOA_CONTEXT, value: large}
        - {name: TOA_ENV, value: default}
        - {name: TOA_AMQP_CONTEXT, value: '{".":["amqp://rabbitmq"]}'}
        - {name: TOA_TELEMETRY_READY, value: '{"enabled":true,"path":"/.ready","port":8001}'}
        - {name: NODE_OPTIONS, value: --max-old-space-size=192}
        envFrom: [{configMapRef: {name: config-%[1]s}}]
        ports: [{containerPort: 8001}]
        readinessProbe: {failureThreshold: 5, httpGet: {path: /.ready, port: 8001}, periodSeconds: 2, timeoutSeconds: 3}
        resources: {limits: {cpu: 500m, memory: 256Mi}, requests: {cpu: 10m, memory: 16Mi}}
      terminationGracePeriodSeconds: %[5]d
`, name, labels, image, largeReplicas, largeGrace))
		}
	}
	return strings.Join(docs, "---\n")
}

// writeLarge writes the kustomization (toa-apply, kubectl: as toa-push writes one, a file per
// kind, the context's label and an images entry per composition pinning it by digest) or the
// chart (helm: the same objects, images pinned and labels set in them) of n compositions at
// generation gen into dir.
func writeLarge(dir, tool string, n, gen int) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	files := map[string]string{}
	kinds := []string{"ConfigMap", "Service", "Deployment"}
	switch tool {
	case "helm":
		files["Chart.yaml"] = "apiVersion: v2\nname: large\nversion: 0.1.0\n"
		for _, kind := range kinds {
			files[filepath.Join("templates", strings.ToLower(kind)+".yaml")] = largeObjects(kind, n, gen, true)
		}
	default:
		var images strings.Builder
		for i := range n {
			image, digest := largeImage(fmt.Sprintf("c%04d", i), gen)
			fmt.Fprintf(&images, "- name: %s\n  digest: %s\n", image, digest)
		}
		files["kustomization.yaml"] = "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n" +
			"resources: [configmap.yaml, service.yaml, deployment.yaml]\nlabels:\n- pairs: {toa/context: large}\nimages:\n" + images.String()
		for _, kind := range kinds {
			files[strings.ToLower(kind)+".yaml"] = largeObjects(kind, n, gen, false)
		}
	}
	for name, data := range files {
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// largeRun is one measured command of item 10.
type largeRun struct {
	wall     time.Duration
	requests int
	rss      int64         // the largest process's peak (time -v)
	left     int           // replaced pods still there when it returned
	gone     time.Duration // from its start until the last replaced pod was gone, when some were left
	ended    time.Time
	failed   string
	events   []auditEvent
}

func (r largeRun) cell() string {
	if r.failed != "" {
		return r.failed
	}
	if r.wall == 0 {
		return "–"
	}
	s := fmt.Sprintf("%s, %d req, %s", secs(r.wall.Seconds()), r.requests, size(float64(r.rss)))
	if r.left > 0 {
		s += fmt.Sprintf(", %d replaced pods left (all gone at %s)", r.left, secs(r.gone.Seconds()))
	}
	return s
}

// untilGone is the run's time until its replaced pods were gone: the measure of an image
// change and a rollback (kubectl's rollout status returns while they terminate; toa-apply waits).
func (r largeRun) untilGone() time.Duration { return max(r.wall, r.gone) }

// largeEnv is what item 10 runs against.
type largeEnv struct {
	kubeconfig, kubectl, helm, toaApply string
	cs                                  *kubernetes.Clientset
	audit                               auditLog
}

// largeSetup finds the control plane, its audit log, kubectl and helm, and builds toa-apply with
// a version of its own, so that its user agent tells the bench's requests from the tests' that
// may run beside it.
func (b *bench) largeSetup() (*largeEnv, string) {
	cache := envOr("TOA_CACHE", filepath.Join(os.Getenv("HOME"), ".cache", "toa-deploy"))
	state := envOr("TOA_TEST_STATE", filepath.Join(cache, "controlplane", "run"))
	e := &largeEnv{kubeconfig: envOr("TOA_TEST_KUBECONFIG", filepath.Join(state, "kubeconfig")),
		kubectl: filepath.Join(state, "bin", "kubectl"), helm: envOr("HELM", filepath.Join(cache, "tools", "helm")),
		audit: auditLog{path: filepath.Join(state, "logs", "audit.log")}}
	for what, path := range map[string]string{"kubeconfig": e.kubeconfig, "kubectl": e.kubectl,
		"audit log (testdata/controlplane/up.sh with its audit policy: make setup)": e.audit.path} {
		if _, err := os.Stat(path); err != nil {
			return nil, fmt.Sprintf("no %s at %s", what, path)
		}
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", e.kubeconfig)
	if err != nil {
		return nil, err.Error()
	}
	if e.cs, err = kubernetes.NewForConfig(cfg); err != nil {
		return nil, err.Error()
	}
	e.toaApply = filepath.Join(b.work, "toa-apply-bench")
	build := exec.Command("go", "build", "-ldflags", "-X main.version=v0.0.0-bench", "-o", e.toaApply, "./cmd/toa-apply")
	build.Dir = b.repo
	if out, err := build.CombinedOutput(); err != nil {
		return nil, fmt.Sprintf("go build ./cmd/toa-apply: %v: %s", err, out)
	}
	return e, ""
}

// agent is the user agent prefix of a tool's requests.
func agent(tool string) string {
	switch tool {
	case "toa-apply":
		return "toa-apply/v0.0.0-bench"
	case "kubectl":
		return "kubectl/"
	}
	return "helm"
}

// timed runs a tool's command under /usr/bin/time -v and counts its requests in the audit log.
func (b *bench) timed(e *largeEnv, tool, ns, log string, env []string, argv ...string) (largeRun, error) {
	m, err := e.audit.mark()
	if err != nil {
		return largeRun{}, err
	}
	wall, rss, _, err := b.rss(env, log, argv...)
	ended := time.Now()
	if err != nil {
		return largeRun{}, err
	}
	events, err := e.audit.since(m, agent(tool), ns)
	if err != nil {
		return largeRun{}, err
	}
	return largeRun{wall: wall, requests: len(events), rss: rss, events: events, ended: ended}, nil
}

// largeCommand is the argv of a tool's step: "apply" (first, no change, image change) or
// "rollback", and whether it waits (kubectl's no-change apply is measured without rollout
// status too).
func (e *largeEnv) command(tool, step, dir, ns string, wait bool) []string {
	switch tool {
	case "toa-apply":
		if step == "rollback" {
			return []string{e.toaApply, "--rollback", "--name", "large", "-n", ns, "--kubeconfig", e.kubeconfig, "--timeout", "30m"}
		}
		return []string{e.toaApply, dir, "-n", ns, "--kubeconfig", e.kubeconfig, "--timeout", "30m"}
	case "kubectl", "kubectl -k":
		// kubectl applies the objects rendered beforehand (rendered.yaml, not timed), or the
		// kustomization itself with -k, kustomize's images transformer and all; its rollback
		// is the earlier objects applied again: kubectl keeps no revisions of a kustomization
		what := "-f " + strconv.Quote(filepath.Join(dir, "..", filepath.Base(dir)+".rendered.yaml"))
		if tool == "kubectl -k" {
			what = "-k " + strconv.Quote(dir)
		}
		script := fmt.Sprintf("set -e\nexport KUBECTL_APPLYSET=true\n%q --kubeconfig %q -n %q apply --server-side --prune --applyset=large %s >/dev/null\n",
			e.kubectl, e.kubeconfig, ns, what)
		if wait {
			script += fmt.Sprintf("%q --kubeconfig %q -n %q rollout status deployment --selector toa/context=large --timeout 30m >/dev/null\n", e.kubectl, e.kubeconfig, ns)
		}
		return []string{"bash", "-c", script}
	}
	if step == "rollback" {
		return []string{e.helm, "rollback", "large", "--wait", "--timeout", helmTimeout, "-n", ns, "--kubeconfig", e.kubeconfig}
	}
	return []string{e.helm, "upgrade", "--install", "large", dir, "--wait", "--timeout", helmTimeout, "-n", ns, "--kubeconfig", e.kubeconfig}
}

// renderFor writes what kubectl applies with -f: the kustomization in dir rendered (by
// toa-apply, whose render is kustomize's, TestDeferredImages says so, in seconds where kubectl's
// kustomize takes minutes at 1,000 compositions), not timed.
func (e *largeEnv) renderFor(dir string) error {
	out, err := exec.Command(e.toaApply, "--render", dir).Output()
	if err != nil {
		return fmt.Errorf("toa-apply --render %s: %w", dir, err)
	}
	return os.WriteFile(filepath.Join(dir, "..", filepath.Base(dir)+".rendered.yaml"), out, 0o644)
}

// largeResult is item 10's figures for one size and tool.
type largeResult struct {
	first, noChange, noChangeApply, noChangeK, change, rollback largeRun
	history, diff                                               largeRun // toa-apply's
}

func (b *bench) large() error {
	fmt.Printf("\n### 10. A large application: toa-apply, kubectl and Helm at 100, 300 and 1,000 compositions\n\n")
	e, missing := b.largeSetup()
	if e == nil {
		fmt.Printf("Not measured: %s.\n", missing)
		return nil
	}
	node, err := e.cs.CoreV1().Nodes().Get(b.ctx, "kwok-node-0", metav1.GetOptions{})
	if err != nil {
		return err
	}
	pods := node.Status.Allocatable[corev1.ResourcePods]
	var sizes []int
	for _, s := range strings.Split(envOr("BENCH_LARGE_SIZES", "100,300,1000"), ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil {
			return fmt.Errorf("BENCH_LARGE_SIZES: %w", err)
		}
		if need := int64(n * largeReplicas * 2); pods.Value() < need {
			return fmt.Errorf("the kwok node takes %s pods, and %d compositions need %d at the height of a rollout", pods.String(), n, need)
		}
		sizes = append(sizes, n)
	}
	tools := strings.Split(envOr("BENCH_LARGE_TOOLS", "toa-apply,kubectl,helm"), ",")
	if _, err := os.Stat(e.helm); err != nil && slices.Contains(tools, "helm") {
		fmt.Printf("Helm left out: no helm at %s (testdata/tools/helm.sh builds it).\n\n", e.helm)
		tools = slices.DeleteFunc(tools, func(t string) bool { return t == "helm" })
	}
	load, _ := os.ReadFile("/proc/loadavg")
	fmt.Printf("Each composition is a Deployment of %d replicas (RollingUpdate, maxSurge 100%%, maxUnavailable 0, terminationGracePeriodSeconds %d), "+
		"a Service and a ConfigMap, written as toa-push writes them: a file per kind, the context's label and an images entry pinning each "+
		"composition's image by digest in the kustomization (the chart: the same objects, pinned and labelled in place). "+
		"Each tool in a namespace of its own, one after the other (the order turns with each size and each round, BENCH_LARGE_ROUNDS), on the project's control plane "+
		"(kwok node kwok-node-0, %s pods allocatable; the controller manager and scheduler at 1000 requests a second). "+
		"`toa-apply DIR -n NS`; `KUBECTL_APPLYSET=true kubectl apply --server-side --prune --applyset=large -n NS -f RENDERED` "+
		"(the kustomization rendered beforehand, not timed: kubectl's server-side apply alone), then "+
		"`kubectl rollout status deployment --selector toa/context=large`, and at 100 and 300 the no-change apply with `-k DIR` too; "+
		"`helm upgrade --install large CHART --wait` (Helm v3 with its defaults, as Toa 289 ran it) and `helm rollback large --wait`. "+
		"kubectl's rollback is the earlier objects applied again. "+
		"Requests: each tool's own, counted in the API server's audit log by user agent (testdata/controlplane/audit-policy.yaml). "+
		"Memory: the largest process's peak RSS (`/usr/bin/time -v`). Load average at the start: %s.\n\n",
		largeReplicas, largeGrace, pods.String(), strings.Join(strings.Fields(string(load))[:3], ", "))
	// BENCH_LARGE_ROUNDS measures every size again, the order turned each round: the tool that
	// goes second on a control plane has been slower by a tenth in most runs
	rounds := 1
	if r, err := strconv.Atoi(os.Getenv("BENCH_LARGE_ROUNDS")); err == nil && r > 1 {
		rounds = r
	}
	var all []largeRound
	for round := range rounds {
		results := map[int]map[string]*largeResult{}
		orders := map[int][]string{}
		for si, n := range sizes {
			results[n] = map[string]*largeResult{}
			order := tools
			if (si+round)%2 == 1 {
				order = reverse(tools)
			}
			orders[n] = order
			for _, tool := range order {
				r, err := b.largeTool(e, tool, n)
				if err != nil {
					return fmt.Errorf("%s, %d compositions: %w", tool, n, err)
				}
				results[n][tool] = r
			}
		}
		all = append(all, largeRound{results: results, orders: orders})
	}
	b.largeReport(sizes, tools, all)
	return nil
}

// largeRound is one round of item 10: each size's results by tool, and the order they ran in.
type largeRound struct {
	results map[int]map[string]*largeResult
	orders  map[int][]string
}

func reverse(list []string) []string {
	out := make([]string, len(list))
	for i, s := range list {
		out[len(list)-1-i] = s
	}
	return out
}

// largeTool measures one tool at one size in a fresh namespace, deleted afterwards.
func (b *bench) largeTool(e *largeEnv, tool string, n int) (*largeResult, error) {
	short := strings.TrimSuffix(tool, "-apply")
	ns := fmt.Sprintf("bench-large-%s-%d", short, n)
	dir := filepath.Join(b.work, "large", fmt.Sprintf("%s-%d", short, n))
	k := func(args ...string) error {
		out, err := exec.Command(e.kubectl, append([]string{"--kubeconfig", e.kubeconfig}, args...)...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("kubectl %s: %v: %s", strings.Join(args, " "), err, out)
		}
		return nil
	}
	_ = k("delete", "namespace", ns, "--wait=true", "--timeout=10m", "--ignore-not-found")
	if err := k("create", "namespace", ns); err != nil {
		return nil, err
	}
	// gone before the next tool starts: at 1,000 compositions the controllers and the API server
	// spend minutes deleting 2,000 pods, which slowed the next tool's first apply by half
	defer func() { _ = k("delete", "namespace", ns, "--wait=true", "--timeout=10m") }()
	r := &largeResult{}
	step := func(what, step string, gen int, wait, clock bool) (largeRun, error) {
		if err := writeLarge(dir, tool, n, gen); err != nil {
			return largeRun{}, err
		}
		if tool == "kubectl" {
			if err := e.renderFor(dir); err != nil {
				return largeRun{}, err
			}
		}
		var pc *podClock
		if clock {
			var err error
			if pc, err = startPodClock(b.ctx, e.cs, ns); err != nil {
				return largeRun{}, err
			}
		}
		fmt.Fprintf(os.Stderr, "bench: large, %d compositions, %s, %s\n", n, tool, what)
		start := time.Now()
		run, err := b.timed(e, tool, ns, fmt.Sprintf("large-%s-%d-%s", short, n, strings.ReplaceAll(what, " ", "-")), nil,
			e.command(tool, step, dir, ns, wait)...)
		if err != nil && tool != "toa-apply" {
			// a peer that fails (Helm's --wait past its --timeout) is a figure too; its later steps are not measured
			fmt.Fprintf(os.Stderr, "bench: large: %s: %v\n", tool, err)
			run, err = largeRun{failed: fmt.Sprintf("failed after %s: %s", secs(time.Since(start).Seconds()), firstLine(err.Error()))}, errPeerFailed
		}
		switch {
		case pc != nil && err == nil:
			var last time.Time
			last, run.left, _ = pc.result(run.ended, 10*time.Minute)
			if run.left > 0 {
				run.gone = last.Sub(run.ended.Add(-run.wall))
			}
		case pc != nil:
			pc.cancel()
			<-pc.stopped
		}
		return run, err
	}
	var err error
	if r.first, err = step("first apply", "apply", 0, true, false); err != nil {
		return r, peerFailed(err)
	}
	if tool == "kubectl" {
		if r.noChangeApply, err = step("no change, apply alone", "apply", 0, false, false); err != nil {
			return r, peerFailed(err)
		}
		if n <= 300 {
			// the same kustomization with -k: kustomize's images transformer walks every object
			// once an images entry (minutes at 1,000 compositions, so not there)
			fmt.Fprintf(os.Stderr, "bench: large, %d compositions, kubectl -k, no change\n", n)
			if r.noChangeK, err = b.timed(e, "kubectl", ns, fmt.Sprintf("large-kubectl-%d-no-change-k", n), nil,
				e.command("kubectl -k", "apply", dir, ns, false)...); err != nil {
				return r, err
			}
		}
	}
	if r.noChange, err = step("no change", "apply", 0, true, false); err != nil {
		return r, peerFailed(err)
	}
	if r.change, err = step("image change", "apply", 1, true, true); err != nil {
		return r, peerFailed(err)
	}
	if tool == "toa-apply" {
		fmt.Fprintf(os.Stderr, "bench: large, %d compositions, toa-apply --history and --diff\n", n)
		if r.history, err = b.timed(e, tool, ns, fmt.Sprintf("large-toa-%d-history", n), nil,
			e.toaApply, "--history", "--name", "large", "-n", ns, "--kubeconfig", e.kubeconfig); err != nil {
			return nil, err
		}
		if err := writeLarge(dir, tool, n, 2); err != nil {
			return nil, err
		}
		// --diff of every image changed: exit 1, differences
		r.diff, err = b.timed(e, tool, ns, fmt.Sprintf("large-toa-%d-diff", n), nil,
			"bash", "-c", fmt.Sprintf("%q %q --diff -n %q --kubeconfig %q >/dev/null; test $? = 1", e.toaApply, dir, ns, e.kubeconfig))
		if err != nil {
			return nil, err
		}
	}
	if r.rollback, err = step("rollback", "rollback", 0, true, true); err != nil {
		return r, peerFailed(err)
	}
	return r, nil
}

// errPeerFailed is a peer's step that failed: recorded, and the rest of its steps left out.
var errPeerFailed = errors.New("a peer's step failed")

func peerFailed(err error) error {
	if errors.Is(err, errPeerFailed) {
		return nil
	}
	return err
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return s
}

func (b *bench) largeReport(sizes []int, tools []string, rounds []largeRound) {
	names := map[string]string{"toa-apply": "toa-apply", "kubectl": "kubectl apply --server-side -f + rollout status", "helm": "helm upgrade --install --wait"}
	for ri, round := range rounds {
		b.largeTables(sizes, tools, round, ri, len(rounds), names)
	}
	results := rounds[0].results
	toa := func(n int) *largeResult { return results[n]["toa-apply"] }
	fmt.Println()
	if r, k := toa(100), results[100]["kubectl"]; r != nil && k != nil {
		limit := 100*3*11/10 + 3*5
		fmt.Printf("- No-change apply of 100 compositions within 1.5× kubectl's server-side apply: %s against %s, %s: %s.\n",
			secs(r.noChange.wall.Seconds()), secs(k.noChangeApply.wall.Seconds()), ratio(r.noChange.wall.Seconds(), k.noChangeApply.wall.Seconds()),
			verdict(r.noChange.wall.Seconds() <= 1.5*k.noChangeApply.wall.Seconds()))
		fmt.Printf("- Its requests at most 1.1 an object plus a few a kind (%d for 300 objects of 3 kinds): %d (%.2f an object): %s.\n",
			limit, r.noChange.requests, float64(r.noChange.requests)/300, verdict(r.noChange.requests <= limit))
		fmt.Printf("\ntoa-apply's requests, no-change apply of 100 compositions (the API server's audit log):\n\n```\n%s\n```\n",
			strings.Join(breakdown(r.noChange.events), "\n"))
	}
	if toa(1000) != nil {
		for _, peer := range []string{"kubectl", "helm"} {
			if results[1000][peer] == nil {
				continue
			}
			for _, c := range []struct {
				what string
				get  func(*largeResult) largeRun
			}{{"first apply", func(r *largeResult) largeRun { return r.first }},
				{"image change, until the replaced pods are gone", func(r *largeResult) largeRun { return r.change }}} {
				// round by round, and the verdict on the median of the rounds' ratios
				var ratios []float64
				var each []string
				for _, round := range rounds {
					r, p := round.results[1000]["toa-apply"], round.results[1000][peer]
					if r == nil || p == nil {
						continue
					}
					toa, its := c.get(r).untilGone().Seconds(), c.get(p).untilGone().Seconds()
					ratios = append(ratios, toa/its)
					each = append(each, fmt.Sprintf("%s against %s (%s, %s first)", secs(toa), secs(its), ratio(toa, its), round.orders[1000][0]))
				}
				if len(ratios) == 0 {
					continue
				}
				mid := median(ratios)
				ok, word := mid <= 1, "no slower than"
				if peer == "helm" {
					ok, word = mid < 1, "faster than"
				}
				fmt.Printf("- %s of 1,000 compositions %s %s: %s; the median ratio %.2f×: %s.\n", c.what, word, names[peer],
					strings.Join(each, "; "), mid, verdict(ok))
			}
		}
		peak := int64(0)
		for _, round := range rounds {
			if r := round.results[1000]["toa-apply"]; r != nil {
				for _, run := range []largeRun{r.first, r.noChange, r.change, r.rollback, r.history, r.diff} {
					peak = max(peak, run.rss)
				}
			}
		}
		fmt.Printf("- toa-apply's peak memory at 1,000 compositions under 200 MiB: %s: %s.\n", size(float64(peak)), verdict(peak < 200<<20))
	}
	// the slope of toa-apply's peak over the sizes measured (least squares)
	var xs, ys []float64
	for _, n := range sizes {
		if r := toa(n); r != nil {
			peak := max(r.first.rss, r.noChange.rss, r.change.rss, r.rollback.rss, r.history.rss, r.diff.rss)
			xs, ys = append(xs, float64(n)), append(ys, float64(peak)/(1<<20))
		}
	}
	if len(xs) >= 2 {
		slope, intercept := fit(xs, ys)
		fmt.Printf("- toa-apply's peak memory grows %.1f MiB per 100 compositions (least squares over %v: %.0f MiB + %.3f MiB a composition).\n",
			slope*100, sizes, intercept, slope)
	}
}

// largeTables prints one round's table for each size.
func (b *bench) largeTables(sizes []int, tools []string, round largeRound, ri, rounds int, names map[string]string) {
	results := round.results
	for _, n := range sizes {
		objects := 3 * n
		of := ""
		if rounds > 1 {
			of = fmt.Sprintf(", round %d of %d (%s first)", ri+1, rounds, round.orders[n][0])
		}
		fmt.Printf("\n%d compositions (%d objects, %d pods)%s:\n\n", n, objects, n*largeReplicas, of)
		fmt.Print("| step |")
		for _, tool := range tools {
			fmt.Printf(" %s |", names[tool])
		}
		fmt.Print("\n|---|")
		for range tools {
			fmt.Print("---:|")
		}
		fmt.Println()
		rows := []struct {
			what string
			get  func(*largeResult) largeRun
		}{
			{"first apply, until every pod is ready", func(r *largeResult) largeRun { return r.first }},
			{"no change (kubectl: apply alone)", func(r *largeResult) largeRun {
				if r.noChangeApply.wall > 0 {
					return r.noChangeApply
				}
				return r.noChange
			}},
			{"no change, and wait", func(r *largeResult) largeRun { return r.noChange }},
			{"no change, kubectl apply -k of the kustomization", func(r *largeResult) largeRun { return r.noChangeK }},
			{"every image changed, until the replaced pods are gone", func(r *largeResult) largeRun { return r.change }},
			{"rollback", func(r *largeResult) largeRun { return r.rollback }},
			{"toa-apply --history", func(r *largeResult) largeRun { return r.history }},
			{"toa-apply --diff (every image changed)", func(r *largeResult) largeRun { return r.diff }},
		}
		for _, row := range rows {
			fmt.Printf("| %s |", row.what)
			for _, tool := range tools {
				if r := results[n][tool]; r != nil {
					fmt.Printf(" %s |", row.get(r).cell())
				} else {
					fmt.Print(" – |")
				}
			}
			fmt.Println()
		}
	}
}

// fit is the least-squares line through the points.
func fit(xs, ys []float64) (slope, intercept float64) {
	n := float64(len(xs))
	var sx, sy, sxx, sxy float64
	for i := range xs {
		sx, sy, sxx, sxy = sx+xs[i], sy+ys[i], sxx+xs[i]*xs[i], sxy+xs[i]*ys[i]
	}
	slope = (n*sxy - sx*sy) / (n*sxx - sx*sx)
	return slope, (sy - slope*sx) / n
}
