package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/toa-deploy/toa-deploy/internal/cli"
	"github.com/toa-deploy/toa-deploy/internal/fault"
	"github.com/toa-deploy/toa-deploy/internal/harness"
	"github.com/toa-deploy/toa-deploy/rollout"
	"github.com/toa-deploy/toa-deploy/rollout/status"
)

const kubeconfigYAML = `apiVersion: v1
kind: Config
current-context: dev
contexts:
- name: dev
  context: {cluster: local, user: me, namespace: shop-dev}
- name: bare
  context: {cluster: local, user: me}
clusters:
- name: local
  cluster: {server: "https://127.0.0.1:6443"}
users:
- name: me
  user: {token: t}
`

// The kubeconfig is read as kubectl reads it: --kubeconfig or KUBECONFIG, --context, and the
// namespace from -n, else the context, else default.
func TestCluster(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config")
	if err := os.WriteFile(path, []byte(kubeconfigYAML), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name      string
		cmd       applyCommand
		env       string
		namespace string
	}{
		{"the context's namespace", applyCommand{Kubeconfig: path}, "", "shop-dev"},
		{"-n", applyCommand{Kubeconfig: path, Namespace: "prod"}, "", "prod"},
		{"a context without one", applyCommand{Kubeconfig: path, Context: "bare"}, "", "default"},
		{"KUBECONFIG", applyCommand{}, path, "shop-dev"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("KUBECONFIG", tt.env)
			cfg, ns, err := tt.cmd.cluster()
			if err != nil {
				t.Fatal(err)
			}
			if ns != tt.namespace || cfg.Host != "https://127.0.0.1:6443" || cfg.BearerToken != "t" {
				t.Errorf("cluster() = %s, %s; want %s", cfg.Host, ns, tt.namespace)
			}
		})
	}
	t.Run("an unknown context is bad input", func(t *testing.T) {
		_, _, err := (&applyCommand{Kubeconfig: path, Context: "nope"}).cluster()
		if cli.ExitCode(err) != cli.ExitBadInput {
			t.Errorf("cluster() = %v, want bad input", err)
		}
	})
	t.Run("a missing kubeconfig is bad input", func(t *testing.T) {
		_, _, err := (&applyCommand{Kubeconfig: filepath.Join(t.TempDir(), "none")}).cluster()
		if cli.ExitCode(err) != cli.ExitBadInput {
			t.Errorf("cluster() = %v, want bad input", err)
		}
	})
}

func TestExitError(t *testing.T) {
	c := &applyCommand{Timeout: 5 * time.Minute}
	tests := []struct {
		err  error
		code int
	}{
		{nil, cli.ExitOK},
		{&status.Failure{Deployment: "composition-a", Pod: "p", Container: "c", Reason: "CrashLoopBackOff"}, cli.ExitFailed},
		{&rollout.ConflictError{Conflicts: []rollout.Conflict{{Manager: "m", Field: ".spec.replicas"}}}, cli.ExitFailed},
		{&fault.Input{Err: errors.New("no label")}, cli.ExitBadInput},
		{fault.TimedOut(&rollout.Awaiting{Objects: []rollout.Status{{Name: "composition-a", Message: "1 old pod terminating: x"}}}), cli.ExitTimeout},
		{fmt.Errorf("apply x: %w", context.DeadlineExceeded), cli.ExitTimeout},
	}
	for _, tt := range tests {
		if got := cli.ExitCode(c.exitError(tt.err)); got != tt.code {
			t.Errorf("exit code of %v = %d, want %d", tt.err, got, tt.code)
		}
	}
}

// kustomization writes a kustomization of one composition: its Deployment and Service, labelled
// with the context, the image's tag set by kustomize, and more pod template labels.
func kustomization(t *testing.T, tag, podLabels string) string {
	t.Helper()
	dir := t.TempDir()
	files := map[string]string{
		"kustomization.yaml": `apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources: [app.yaml]
labels:
- pairs: {toa/context: demo}
  includeSelectors: false
  includeTemplates: true
images:
- {name: registry.local/demo/carts, newTag: ` + tag + `}
`,
		"app.yaml": `apiVersion: apps/v1
kind: Deployment
metadata: {name: composition-carts}
spec:
  replicas: 2
  selector: {matchLabels: {toa/composition: carts}}
  strategy: {type: RollingUpdate, rollingUpdate: {maxSurge: 100%, maxUnavailable: 0}}
  template:
    metadata: {labels: {toa/composition: carts` + podLabels + `}}
    spec:
      terminationGracePeriodSeconds: 2
      containers: [{name: carts, image: registry.local/demo/carts}]
---
apiVersion: v1
kind: Service
metadata: {name: carts}
spec:
  selector: {toa/composition: carts}
  ports: [{port: 3000}]
`,
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// toa-apply's exit codes on the local control plane: 0 rolled out, 1 a crash-looping rollout,
// 3 a timeout, and --delete.
func TestApplyExitCodes(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the local control plane")
	}
	kubeconfig := harness.Kubeconfig(t)
	ns := harness.Namespace(t, kubeconfig)
	log := cli.Logger(io.Discard, false)
	run := func(dir string, change func(c *applyCommand)) error {
		// a request bound shorter than the rollouts: it must not cut the wait's watches
		c := &applyCommand{Dir: dir, DryRun: "none", HistoryMax: 10, Timeout: time.Minute, RequestTimeout: 2 * time.Second,
			Prune: true, Kubeconfig: kubeconfig, Namespace: ns, Output: cli.Text}
		if change != nil {
			change(c)
		}
		return c.Run(context.Background(), log)
	}

	if err := run(kustomization(t, "v1", ""), nil); err != nil {
		t.Fatalf("toa-apply: %v", err)
	}
	start := time.Now()
	err := run(kustomization(t, "v2", ", toa-test/fail: crashloop"), nil)
	t.Logf("crash loop: exit %d after %s: %v", cli.ExitCode(err), time.Since(start).Round(time.Millisecond), err)
	if cli.ExitCode(err) != cli.ExitFailed || !strings.Contains(fmt.Sprint(err), "CrashLoopBackOff") {
		t.Errorf("a crash-looping rollout: exit %d, %v; want %d and CrashLoopBackOff", cli.ExitCode(err), err, cli.ExitFailed)
	}
	// explained: the pod's containers' last state and its Events
	for _, part := range []string{"last state: terminated, exit code 1 (Error)", "events (last seen", "Scheduled"} {
		if !strings.Contains(fmt.Sprint(err), part) {
			t.Errorf("the failure does not say %q", part)
		}
	}
	err = run(kustomization(t, "v3", ""), func(c *applyCommand) { c.Timeout = 2 * time.Second })
	t.Logf("timeout: exit %d: %v", cli.ExitCode(err), err)
	if cli.ExitCode(err) != cli.ExitTimeout || !strings.Contains(fmt.Sprint(err), "composition-carts") {
		t.Errorf("a timeout: exit %d, %v; want %d naming the Deployment", cli.ExitCode(err), err, cli.ExitTimeout)
	}
	if !strings.Contains(fmt.Sprint(err), "  pod composition-carts-") {
		t.Errorf("the timeout does not show the awaited pods: %v", err)
	}
	if err := run(kustomization(t, "v3", ""), func(c *applyCommand) { c.Delete = true }); err != nil {
		t.Errorf("toa-apply --delete: %v", err)
	}
}

// silentServer accepts connections and never answers: the API server of a kubeconfig that is
// up but hung, or a port that is something else's.
func silentServer(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn
	var mu sync.Mutex
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, conn) // held open, never read from or written to
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return l.Addr().String()
}

// A server that accepts and never answers fails the run within --request-timeout, not
// --timeout, with exit 3 and a message that names the server; over plain HTTP and over TLS.
func TestSilentServer(t *testing.T) {
	addr := silentServer(t)
	for _, server := range []string{"http://" + addr, "https://" + addr} {
		t.Run(server[:strings.Index(server, ":")], func(t *testing.T) {
			kubeconfig := filepath.Join(t.TempDir(), "config")
			cfg := strings.ReplaceAll(kubeconfigYAML, "https://127.0.0.1:6443", server)
			cfg = strings.ReplaceAll(cfg, "cluster: {server:", "cluster: {insecure-skip-tls-verify: true, server:")
			if err := os.WriteFile(kubeconfig, []byte(cfg), 0o600); err != nil {
				t.Fatal(err)
			}
			c := &applyCommand{Dir: kustomization(t, "v1", ""), DryRun: "none", HistoryMax: 10, Timeout: 5 * time.Minute,
				RequestTimeout: 2 * time.Second, Prune: true, Kubeconfig: kubeconfig, Output: cli.Text}
			start := time.Now()
			err := c.Run(context.Background(), cli.Logger(io.Discard, false))
			took := time.Since(start)
			t.Logf("exit %d after %s: %v", cli.ExitCode(err), took.Round(time.Millisecond), err)
			if cli.ExitCode(err) != cli.ExitTimeout {
				t.Errorf("exit %d, want %d", cli.ExitCode(err), cli.ExitTimeout)
			}
			if !strings.Contains(fmt.Sprint(err), addr) || !strings.Contains(fmt.Sprint(err), "--request-timeout") {
				t.Errorf("%v does not name the server and --request-timeout", err)
			}
			if took > 10*time.Second {
				t.Errorf("took %s with --request-timeout 2s", took)
			}
		})
	}
}

// Credentials the API server refuses (401), or a user it knows that may not apply (403): the
// message says which kubeconfig user to check and how; a real API server answers.
func TestRefusedCredentials(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the local control plane")
	}
	kubeconfig := harness.Kubeconfig(t)
	ns := harness.Namespace(t, kubeconfig)
	raw, err := clientcmd.LoadFromFile(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		change func(u *clientcmdapi.AuthInfo)
		want   []string
	}{
		{"401", func(u *clientcmdapi.AuthInfo) { u.Token = "not-a-token" }, []string{"Unauthorized", "did not accept user", "token or client certificate", "kubectl auth whoami"}},
		{"403", func(u *clientcmdapi.AuthInfo) { u.Impersonate = "toa-test-nobody" }, []string{"forbidden", "does not allow this", "Roles and RoleBindings", "kubectl auth can-i"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := raw.DeepCopy()
			for _, u := range cfg.AuthInfos {
				tt.change(u)
			}
			path := filepath.Join(t.TempDir(), "config")
			if err := clientcmd.WriteToFile(*cfg, path); err != nil {
				t.Fatal(err)
			}
			c := &applyCommand{Dir: kustomization(t, "v1", ""), DryRun: "none", HistoryMax: 10, Timeout: time.Minute,
				RequestTimeout: 10 * time.Second, Prune: true, Kubeconfig: path, Namespace: ns, Output: cli.Text}
			err := c.Run(context.Background(), cli.Logger(io.Discard, false))
			t.Logf("exit %d: %v", cli.ExitCode(err), err)
			if cli.ExitCode(err) != cli.ExitFailed {
				t.Errorf("exit %d, want %d", cli.ExitCode(err), cli.ExitFailed)
			}
			for _, part := range append(tt.want, path) {
				if !strings.Contains(fmt.Sprint(err), part) {
					t.Errorf("the error does not say %q", part)
				}
			}
		})
	}
}
