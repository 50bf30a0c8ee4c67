package rollout

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	kube "github.com/toa-deploy/toa-deploy/internal/cluster"
	"github.com/toa-deploy/toa-deploy/internal/harness"
)

// cluster is a test's view of the local control plane: a namespace of its own and clients.
type cluster struct {
	kubeconfig string
	cfg        *rest.Config
	k          *kube.Client // the run's client, as toa-apply builds it once
	cs         kubernetes.Interface
	ns         string
}

func newCluster(t *testing.T) *cluster {
	t.Helper()
	cp := harness.OnControlPlane(t)
	return &cluster{kubeconfig: cp.Kubeconfig, cfg: cp.Config, k: cp.Client, cs: cp.Client.Typed, ns: cp.Namespace}
}

func (c *cluster) opts() Options {
	return Options{Namespace: c.ns, Prune: true, Version: "v0.0.0-test"}
}

// apply applies and waits, failing the test on an error.
func (c *cluster) apply(t *testing.T, objects ...*unstructured.Unstructured) *Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := Apply(ctx, c.k, objects, c.opts())
	if err != nil {
		t.Fatalf("Apply: %v", err)
	}
	if err := Wait(ctx, c.k, res, WaitOptions{OnStatus: logStatus(t)}); err != nil {
		t.Fatalf("Wait: %v", err)
	}
	return res
}

func logStatus(t *testing.T) func(Status) {
	start := time.Now()
	return func(s Status) {
		t.Logf("%6.2fs %s: %s", time.Since(start).Seconds(), s.Name, s.Message)
	}
}

func (c *cluster) pods(t *testing.T, composition string) []corev1.Pod {
	t.Helper()
	list, err := c.cs.CoreV1().Pods(c.ns).List(context.Background(), metav1.ListOptions{LabelSelector: "toa/composition=" + composition})
	if err != nil {
		t.Fatal(err)
	}
	return list.Items
}

// kubectl is the kubectl built with the control plane.
func kubectl(t *testing.T, kubeconfig string) string {
	t.Helper()
	candidates := []string{os.Getenv("TOA_KUBECTL"), filepath.Join(filepath.Dir(kubeconfig), "bin", "kubectl")}
	if cache := os.Getenv("TOA_CACHE"); cache != "" {
		candidates = append(candidates, filepath.Join(cache, "controlplane", "bin", "kubectl"))
	}
	if home, err := os.UserHomeDir(); err == nil {
		candidates = append(candidates, filepath.Join(home, ".cache", "toa-deploy", "controlplane", "bin", "kubectl"))
	}
	for _, p := range candidates {
		if p == "" {
			continue
		}
		if info, err := os.Stat(p); err == nil && !info.IsDir() {
			return p
		}
	}
	if p, err := exec.LookPath("kubectl"); err == nil {
		return p
	}
	t.Fatalf("no kubectl: looked at %v and on PATH; set TOA_KUBECTL", candidates)
	return ""
}

// The application's objects, built like Toa's: compositions' Deployments and components'
// Services, every object labelled with its context.

const context_ = "shop"

type deploymentSpec struct {
	name     string
	image    string
	replicas int32
	grace    int64
	labels   map[string]string // more pod template labels, toa-test/fail
	env      []corev1.EnvVar
	selector map[string]string // node selector
}

func composition(s deploymentSpec) *appsv1.Deployment {
	if s.replicas == 0 {
		s.replicas = 2
	}
	if s.image == "" {
		s.image = "registry.local/shop/" + s.name + ":v1"
	}
	selector := map[string]string{"toa/composition": s.name}
	labels := map[string]string{"toa/composition": s.name, "toa/component-" + s.name + "-" + s.name: "1", "toa/context": context_}
	for k, v := range s.labels {
		labels[k] = v
	}
	surge, unavailable := intstr.FromString("100%"), intstr.FromInt32(0)
	return &appsv1.Deployment{
		TypeMeta: metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: metav1.ObjectMeta{Name: "composition-" + s.name,
			Labels: map[string]string{"toa/context": context_}},
		Spec: appsv1.DeploymentSpec{
			Replicas:                &s.replicas,
			ProgressDeadlineSeconds: ptr(int32(900)),
			Strategy: appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType,
				RollingUpdate: &appsv1.RollingUpdateDeployment{MaxUnavailable: &unavailable, MaxSurge: &surge}},
			Selector: &metav1.LabelSelector{MatchLabels: selector},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					TerminationGracePeriodSeconds: &s.grace,
					NodeSelector:                  s.selector,
					Containers: []corev1.Container{{
						Name:  s.name,
						Image: s.image,
						Env:   s.env,
					}},
				},
			},
		},
	}
}

func service(name string) *corev1.Service {
	return &corev1.Service{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: metav1.ObjectMeta{Name: name + "-" + name,
			Labels: map[string]string{"toa/context": context_}},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"toa/component-" + name + "-" + name: "1"},
			Ports:    []corev1.ServicePort{{Name: "http-binding", Port: 3000, TargetPort: intstr.FromInt32(3000)}},
		},
	}
}

func u(t *testing.T, obj runtime.Object) *unstructured.Unstructured {
	t.Helper()
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		t.Fatal(err)
	}
	out := &unstructured.Unstructured{Object: m}
	// what a rendered manifest does not carry
	unstructured.RemoveNestedField(out.Object, "metadata", "creationTimestamp")
	unstructured.RemoveNestedField(out.Object, "spec", "template", "metadata", "creationTimestamp")
	unstructured.RemoveNestedField(out.Object, "status")
	return out
}

// app is a composition's Deployment and its Service.
func app(t *testing.T, s deploymentSpec) []*unstructured.Unstructured {
	return []*unstructured.Unstructured{u(t, composition(s)), u(t, service(s.name))}
}
