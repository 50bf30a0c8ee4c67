// Package harness is the tests' access to the real parts they run against:
// the local Kubernetes control plane (etcd, kube-apiserver,
// kube-controller-manager, kube-scheduler and kwok's simulated node) that
// testdata/controlplane/up.sh starts on 127.0.0.1, and that `make test`
// starts before the tests.
package harness

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	watchtools "k8s.io/client-go/tools/watch"

	"github.com/toa-deploy/toa-deploy/internal/cluster"
)

// ControlPlane is a test's view of the local control plane: the kubeconfig, its rest.Config,
// the clients toa-apply builds of it once a run, and a namespace of the test's own.
type ControlPlane struct {
	Kubeconfig string
	Config     *rest.Config
	Client     *cluster.Client
	Namespace  string
}

// OnControlPlane is the local control plane for t (Kubeconfig), with a namespace of its own
// (Namespace); skipped under -short.
func OnControlPlane(t testing.TB) *ControlPlane {
	t.Helper()
	kubeconfig := Kubeconfig(t)
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatalf("read %s: %v", kubeconfig, err)
	}
	k, err := cluster.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &ControlPlane{Kubeconfig: kubeconfig, Config: cfg, Client: k, Namespace: Namespace(t, kubeconfig)}
}

// Kubeconfig returns the path of a kubeconfig for the local control plane:
// $TOA_TEST_KUBECONFIG if set, else the one up.sh writes,
// $TOA_TEST_STATE/kubeconfig (by default
// ~/.cache/toa-deploy/controlplane/run/kubeconfig). The API server must
// answer; otherwise the test fails, saying how to start it. Under
// `go test -short` (`make unit`, a machine with nothing installed) the test
// is skipped.
func Kubeconfig(t testing.TB) string {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: this test needs the local control plane")
	}
	path, fromEnv := os.Getenv("TOA_TEST_KUBECONFIG"), true
	if path == "" {
		path, fromEnv = filepath.Join(stateDir(), "kubeconfig"), false
		if _, err := os.Stat(path); err != nil {
			t.Fatalf("no Kubernetes control plane for the tests: %s does not exist. "+
				"Run `make test` (which starts it) or testdata/controlplane/up.sh, "+
				"or set TOA_TEST_KUBECONFIG", path)
		}
	}
	if err := ping(path); err != nil {
		where := path
		if fromEnv {
			where = "TOA_TEST_KUBECONFIG=" + path
		}
		t.Fatalf("the Kubernetes control plane of %s does not answer: %v. "+
			"Run `make test` (which starts it) or testdata/controlplane/up.sh", where, err)
	}
	return path
}

// stateDir is up.sh's folder of run state.
func stateDir() string {
	if s := os.Getenv("TOA_TEST_STATE"); s != "" {
		return s
	}
	cache := os.Getenv("TOA_CACHE")
	if cache == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			home = "."
		}
		cache = filepath.Join(home, ".cache", "toa-deploy")
	}
	return filepath.Join(cache, "controlplane", "run")
}

// ping asks the API server whether it is ready.
func ping(kubeconfig string) error {
	cs, err := newClientset(kubeconfig)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	body, err := cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
	if err != nil {
		return fmt.Errorf("GET /readyz: %w", err)
	}
	if strings.TrimSpace(string(body)) != "ok" {
		return fmt.Errorf("GET /readyz: %q", body)
	}
	return nil
}

func newClientset(kubeconfig string) (*kubernetes.Clientset, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("load kubeconfig %s: %w", kubeconfig, err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("client for %s: %w", kubeconfig, err)
	}
	return cs, nil
}

// clientset returns a typed client for the kubeconfig, failing the test if
// it cannot.
func clientset(t testing.TB, kubeconfig string) *kubernetes.Clientset {
	t.Helper()
	cs, err := newClientset(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

var notInName = regexp.MustCompile(`[^a-z0-9]+`)

// Namespace creates a namespace of its own for the test, named after it,
// and deletes it when the test ends. It returns once the namespace's
// default ServiceAccount exists, so pods can be created in it at once.
func Namespace(t testing.TB, kubeconfig string) string {
	t.Helper()
	cs := clientset(t, kubeconfig)

	prefix := strings.Trim(notInName.ReplaceAllString(strings.ToLower(t.Name()), "-"), "-")
	if len(prefix) > 40 {
		prefix = strings.TrimRight(prefix[:40], "-")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ns, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName: "toa-test-" + prefix + "-",
			Labels:       map[string]string{"toa-test/test": "true"},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create a namespace for %s: %v", t.Name(), err)
	}
	name := ns.Name
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		// The namespace controller deletes what is left in it; the test
		// need not wait for that.
		err := cs.CoreV1().Namespaces().Delete(ctx, name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("delete namespace %s: %v", name, err)
		}
	})

	// The ServiceAccount admission plugin rejects pods until the
	// serviceaccount controller has made the namespace's default account.
	lw := cache.NewListWatchFromClient(cs.CoreV1().RESTClient(), "serviceaccounts", name,
		fields.OneTermEqualSelector("metadata.name", "default"))
	_, err = watchtools.UntilWithSync(ctx, lw, &corev1.ServiceAccount{}, nil,
		func(ev watch.Event) (bool, error) { return ev.Type != watch.Deleted, nil })
	if err != nil {
		t.Fatalf("wait for the default ServiceAccount of namespace %s: %v", name, err)
	}
	return name
}
