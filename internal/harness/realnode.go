package harness

// The control plane's real node: a kubelet and containerd beside kwok's simulated node
// (testdata/controlplane/realnode), on which pods really start, are probed and are stopped with
// SIGTERM and their grace period. It is tainted, so that every other test's pods stay on kwok's
// node; a test places its workloads there with RealNodeOverlay.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const (
	// RealNodeName is the real node's name, RealNodeLabel=RealNodeValue its label.
	RealNodeName  = "toa-real-node"
	RealNodeLabel = "toa-test/node"
	RealNodeValue = "real"
	// RealNodeTaint is the key of its NoSchedule taint (value "true").
	RealNodeTaint = "toa-test/real-node"
)

// RealNode returns the real node's name once it is Ready. Where the host cannot run it
// (realnode/up.sh wrote why into $TOA_TEST_STATE/realnode.unavailable) or it is not up, the test
// is skipped with the reason.
func RealNode(t testing.TB, kubeconfig string) string {
	t.Helper()
	if reason, err := os.ReadFile(filepath.Join(stateDir(), "realnode.unavailable")); err == nil {
		t.Skipf("no real node on this host: %s", strings.TrimSpace(string(reason)))
	}
	cs := clientset(t, kubeconfig)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	node, err := cs.CoreV1().Nodes().Get(ctx, RealNodeName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		t.Skipf("no real node: the cluster has no node %s (testdata/controlplane/up.sh starts it; "+
			"its logs are under %s)", RealNodeName, filepath.Join(stateDir(), "realnode", "logs"))
	}
	if err != nil {
		t.Fatalf("get node %s: %v", RealNodeName, err)
	}
	if ready := nodeReady(node); ready != "" {
		t.Skipf("no real node: %s is not Ready (%s); testdata/controlplane/up.sh restarts it", RealNodeName, ready)
	}
	return node.Name
}

// nodeReady says why a node is not Ready, or "" when it is.
func nodeReady(n *corev1.Node) string {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			if c.Status == corev1.ConditionTrue {
				return ""
			}
			return fmt.Sprintf("Ready=%s: %s", c.Status, c.Message)
		}
	}
	return "no Ready condition"
}

// RealNodeOverlay writes a kustomization beside base (a folder toa-push wrote) that places
// every Deployment's pods on the real node (its label as nodeSelector, its taint tolerated) and
// gives their first container the variables env, and returns its folder: an overlay, as a user
// would write one to choose a node pool.
func RealNodeOverlay(t testing.TB, base string, env map[string]string) string {
	t.Helper()
	dir, err := writeRealNodeOverlay(t.TempDir(), base, env)
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

func writeRealNodeOverlay(parent, base string, env map[string]string) (string, error) {
	abs, err := filepath.Abs(base)
	if err != nil {
		return "", err
	}
	dir := filepath.Join(parent, "realnode")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	rel, err := filepath.Rel(dir, abs)
	if err != nil {
		return "", err
	}
	var patch strings.Builder
	fmt.Fprintf(&patch, "- op: add\n  path: /spec/template/spec/nodeSelector\n  value: {%q: %q}\n", RealNodeLabel, RealNodeValue)
	fmt.Fprintf(&patch, "- op: add\n  path: /spec/template/spec/tolerations\n  value:\n  - {key: %q, operator: Equal, value: \"true\", effect: NoSchedule}\n", RealNodeTaint)
	names := make([]string, 0, len(env))
	for name := range env {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		fmt.Fprintf(&patch, "- op: add\n  path: /spec/template/spec/containers/0/env/-\n  value: {name: %q, value: %q}\n", name, env[name])
	}
	if err := os.WriteFile(filepath.Join(dir, "realnode.yaml"), []byte(patch.String()), 0o644); err != nil {
		return "", err
	}
	kustomization := fmt.Sprintf(`# The pods of every Deployment on the tests' real node (internal/harness/realnode.go).
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
- %s
patches:
- path: realnode.yaml
  target:
    kind: Deployment
`, filepath.ToSlash(rel))
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(kustomization), 0o644); err != nil {
		return "", err
	}
	return dir, nil
}
