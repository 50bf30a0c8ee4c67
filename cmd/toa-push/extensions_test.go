package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/toa-deploy/toa-deploy/internal/harness"
)

// The portal application, with the stand-in extensions installed under its node_modules, pushed
// to a real registry and applied on the local control plane by toa-apply: first with the gateway,
// the streams and the explorer as services of their own, then with the edge composition running
// the gateway in its pod, then as mono.
func TestExtensionsEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("needs a registry, npm and the control plane")
	}
	if os.Getenv("TOA_TEST_NO_CLUSTER") == "1" {
		t.Skip("TOA_TEST_NO_CLUSTER=1: no control plane")
	}
	kubeconfig := harness.Kubeconfig(t)
	namespace := harness.Namespace(t, kubeconfig)
	cs := clientsetFor(t, kubeconfig)
	claim(t, cs, namespace, "portal-uploads")
	apply := buildApply(t)

	addr := harness.Registry(t)
	harness.PushTestBase(t, addr)
	dir := copyApp(t, "extended", addr)
	cache := t.TempDir()
	deployment := filepath.Join(dir, "deployment")

	t.Run("services of their own", func(t *testing.T) {
		out := push(t, dir, cache)
		var names []string
		for _, img := range out.Images {
			names = append(names, img.Name)
			if !img.Built || img.Digest == "" {
				t.Errorf("%s: %+v", img.Name, img)
			}
		}
		// the services in the order Toa meets their extensions: realtime (portal.accounts names it)
		// before exposition (portal.pages), the standalone explorer last
		want := []string{"composition-edge", "composition-portal-accounts", "composition-portal-audit",
			"extension-realtime-streams", "extension-exposition-gateway", "extension-introspection-explorer"}
		if !reflect.DeepEqual(names, want) {
			t.Fatalf("images %v, want %v", names, want)
		}
		gateway := out.Images[4]
		idx, m := index(t, gateway.Reference)
		if len(m.Manifests) != 1 {
			t.Fatalf("the gateway's index: %d manifests", len(m.Manifests))
		}
		img := platformImage(t, idx, m, "amd64")
		cfg, _ := img.ConfigFile()
		if got := strings.Join(cfg.Config.Cmd, " "); got != "toa serve ." || cfg.Config.WorkingDir != "/composition/service" {
			t.Errorf("command %q in %s", got, cfg.Config.WorkingDir)
		}
		fs := files(t, img)
		for _, f := range []string{"composition/service/package.json", "composition/service/index.js",
			"composition/service/components/identity.tokens/manifest.toa.yaml"} {
			if !fs[f] {
				t.Errorf("the gateway's image lacks %s", f)
			}
		}
		stdout, stderr, code := harness.Chroot(t, harness.Unpack(t, img), cfg.Config)
		if code != 0 || !strings.Contains(stdout, "serving /composition/service") {
			t.Errorf("toa serve . exited %d:\n%s\n%s", code, stdout, stderr)
		}

		runCommand(t, apply, deployment, "--kubeconfig", kubeconfig, "-n", namespace, "--timeout", "3m")
		d := getDeployment(t, cs, namespace, "extension-exposition-gateway")
		if d.Spec.Template.Labels["toa/service-exposition-gateway"] != "1" {
			t.Errorf("gateway labels %v", d.Spec.Template.Labels)
		}
		if c := d.Spec.Template.Spec.Containers[0]; c.Image != gateway.Reference || !hasEnv(c, "TOA_CONFIGURATION__TOKENS_KEY") {
			t.Errorf("gateway container: image %s, env %v", c.Image, envNames(c))
		}
		svc, err := cs.CoreV1().Services(namespace).Get(context.Background(), "extension-exposition-gateway", metav1.GetOptions{})
		if err != nil || svc.Spec.Ports[0].Port != 8000 || svc.Spec.Selector["toa/service-exposition-gateway"] != "1" {
			t.Errorf("gateway service: %v %+v", err, svc)
		}
		rules := ingressRules(t, cs, namespace, "extension-exposition-gateway")
		if want := []string{"api.portal.example.com / extension-exposition-gateway:8000"}; !reflect.DeepEqual(rules, want) {
			t.Errorf("gateway ingress %v, want %v", rules, want)
		}
		rules = ingressRules(t, cs, namespace, "extension-introspection-explorer")
		if want := []string{"portal.example.com /.introspection extension-introspection-explorer:8002"}; !reflect.DeepEqual(rules, want) {
			t.Errorf("explorer ingress %v, want %v", rules, want)
		}
		getDeployment(t, cs, namespace, "extension-realtime-streams")
		if _, err := cs.CoreV1().Services(namespace).Get(context.Background(), "extension-realtime-streams", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("a Service of the streams, which have no port: %v", err)
		}
		checkAccounts(t, cs, namespace)
		edge := getDeployment(t, cs, namespace, "composition-edge").Spec.Template.Spec.Containers[0]
		if hasEnv(edge, "TOA_SERVICES") || hasEnv(edge, "TOA_CONFIGURATION__TOKENS_KEY") {
			t.Errorf("edge runs no service: %v", envNames(edge))
		}
	})

	t.Run("the edge composition runs the gateway", func(t *testing.T) {
		out := push(t, dir, cache, "hosted")
		for _, img := range out.Images {
			if img.Name == "extension-exposition-gateway" {
				t.Errorf("an image for the gateway a composition runs")
			}
		}
		runCommand(t, apply, deployment, "--kubeconfig", kubeconfig, "-n", namespace, "--timeout", "3m")
		if _, err := cs.AppsV1().Deployments(namespace).Get(context.Background(), "extension-exposition-gateway", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("the gateway's own Deployment is still there: %v", err)
		}
		d := getDeployment(t, cs, namespace, "composition-edge")
		c := d.Spec.Template.Spec.Containers[0]
		if d.Spec.Template.Labels["toa/service-exposition-gateway"] != "1" || c.Env[0].Name != "TOA_SERVICES" ||
			c.Env[0].Value != "@toa.io/extensions.exposition" || !hasEnv(c, "TOA_CONFIGURATION__TOKENS_KEY") ||
			!hasEnv(c, "TOA_EXPOSITION_PROPERTIES") || c.ReadinessProbe.HTTPGet.Port.IntVal != 8004 {
			t.Errorf("edge: labels %v, env %v, probe %+v", d.Spec.Template.Labels, envNames(c), c.ReadinessProbe)
		}
		pods, err := cs.CoreV1().Pods(namespace).List(context.Background(), metav1.ListOptions{LabelSelector: "toa/service-exposition-gateway=1"})
		if err != nil || len(pods.Items) == 0 {
			t.Fatalf("no pod the gateway's Service selects: %v", err)
		}
		for _, p := range pods.Items {
			if p.Labels["toa/composition"] != "edge" {
				t.Errorf("pod %s of %v", p.Name, p.Labels)
			}
		}
		if rules := ingressRules(t, cs, namespace, "extension-exposition-gateway"); len(rules) != 1 {
			t.Errorf("the gateway's ingress: %v", rules)
		}
		checkAccounts(t, cs, namespace)
	})

	t.Run("mono", func(t *testing.T) {
		out := push(t, dir, cache, "--mono")
		if len(out.Images) != 1 || out.Images[0].Name != "mono" {
			t.Fatalf("images %+v", out.Images)
		}
		runCommand(t, apply, deployment, "--kubeconfig", kubeconfig, "-n", namespace, "--timeout", "3m")
		deployments, err := cs.AppsV1().Deployments(namespace).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, d := range deployments.Items {
			names = append(names, d.Name)
		}
		if !reflect.DeepEqual(names, []string{"mono"}) {
			t.Errorf("deployments %v, want mono alone", names)
		}
		c := getDeployment(t, cs, namespace, "mono").Spec.Template.Spec.Containers[0]
		if c.Image != out.Images[0].Reference || !hasEnv(c, "TOA_CONFIGURATION__ACCOUNTS_SECRET") || !hasEnv(c, "TOA_REALTIME") ||
			len(c.VolumeMounts) != 1 || *getDeployment(t, cs, namespace, "mono").Spec.Replicas != 1 {
			t.Errorf("mono: %s %v %v", c.Image, envNames(c), c.VolumeMounts)
		}
		svc, err := cs.CoreV1().Services(namespace).Get(context.Background(), "mono", metav1.GetOptions{})
		if err != nil || len(svc.Spec.Ports) != 2 || svc.Spec.Ports[0].Port != 8002 || svc.Spec.Ports[1].Port != 8000 {
			t.Errorf("mono's Service: %v %+v", err, svc.Spec.Ports)
		}
		want := []string{
			"portal.example.com /.introspection mono:8002", "portal.example.com / mono:8000",
			"api.portal.example.com /.introspection mono:8002", "api.portal.example.com / mono:8000",
		}
		if rules := ingressRules(t, cs, namespace, "mono"); !reflect.DeepEqual(rules, want) {
			t.Errorf("mono's ingress\n%v\nwant, the longest path first\n%v", rules, want)
		}
	})
}

// checkAccounts: the storage's volume and the configuration's secret references are on the
// accounts' pods, and on no other composition's.
func checkAccounts(t *testing.T, cs *kubernetes.Clientset, namespace string) {
	t.Helper()
	accounts := getDeployment(t, cs, namespace, "composition-portal-accounts").Spec.Template.Spec
	c := accounts.Containers[0]
	if len(accounts.Volumes) != 1 || accounts.Volumes[0].PersistentVolumeClaim.ClaimName != "portal-uploads" ||
		len(c.VolumeMounts) != 1 || c.VolumeMounts[0].MountPath != "/var/portal/uploads" {
		t.Errorf("accounts' volumes %+v, mounts %+v", accounts.Volumes, c.VolumeMounts)
	}
	found := false
	for _, e := range c.Env {
		if e.Name == "TOA_CONFIGURATION__ACCOUNTS_SECRET" && e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil &&
			e.ValueFrom.SecretKeyRef.Name == "toa-configuration" && e.ValueFrom.SecretKeyRef.Key == "ACCOUNTS_SECRET" {
			found = true
		}
	}
	if !found || !hasEnv(c, "TOA_EVENTS_PORTAL_ACCOUNTS") {
		t.Errorf("accounts' env %v", envNames(c))
	}
	audit := getDeployment(t, cs, namespace, "composition-portal-audit").Spec.Template.Spec
	if len(audit.Volumes) != 0 || hasEnv(audit.Containers[0], "TOA_CONFIGURATION__ACCOUNTS_SECRET") {
		t.Errorf("audit has the accounts' volume or secret: %+v %v", audit.Volumes, envNames(audit.Containers[0]))
	}
}

func clientsetFor(t *testing.T, kubeconfig string) *kubernetes.Clientset {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// claim makes a volume claim bound to a volume of its own, so that pods that mount it schedule.
func claim(t *testing.T, cs *kubernetes.Clientset, namespace, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	empty := ""
	size := corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: namespace + "-" + name},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:               size,
			AccessModes:            []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany},
			PersistentVolumeSource: corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/tmp/" + name}},
			ClaimRef:               &corev1.ObjectReference{Namespace: namespace, Name: name},
			StorageClassName:       empty,
		},
	}
	if _, err := cs.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cs.CoreV1().PersistentVolumes().Delete(context.Background(), pv.Name, metav1.DeleteOptions{})
	})
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany},
			Resources:        corev1.VolumeResourceRequirements{Requests: size},
			VolumeName:       pv.Name,
			StorageClassName: &empty,
		},
	}
	if _, err := cs.CoreV1().PersistentVolumeClaims(namespace).Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// buildApply builds toa-apply beside the toa-push the tests run.
func buildApply(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(filepath.Dir(binary), "toa-apply")
	if _, err := os.Stat(bin); err == nil {
		return bin
	}
	if out, err := exec.Command("go", "build", "-o", bin, "../toa-apply").CombinedOutput(); err != nil {
		t.Fatalf("build toa-apply: %v\n%s", err, out)
	}
	return bin
}

// runCommand runs a command and fails the test when it fails.
func runCommand(t *testing.T, bin string, args ...string) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "CI=true")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", filepath.Base(bin), strings.Join(args, " "), err, out)
	}
	t.Logf("%s:\n%s", filepath.Base(bin), out)
}

func getDeployment(t *testing.T, cs *kubernetes.Clientset, namespace, name string) *appsv1.Deployment {
	t.Helper()
	d, err := cs.AppsV1().Deployments(namespace).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("Deployment %s: %v", name, err)
	}
	return d
}

// ingressRules spells an Ingress's rules as "host path service:port", in order.
func ingressRules(t *testing.T, cs *kubernetes.Clientset, namespace, name string) []string {
	t.Helper()
	in, err := cs.NetworkingV1().Ingresses(namespace).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("Ingress %s: %v", name, err)
	}
	var out []string
	for _, r := range in.Spec.Rules {
		for _, p := range r.HTTP.Paths {
			if *p.PathType != networkingv1.PathTypePrefix {
				t.Errorf("%s: path type %s", name, *p.PathType)
			}
			out = append(out, fmt.Sprintf("%s %s %s:%d", r.Host, p.Path, p.Backend.Service.Name, p.Backend.Service.Port.Number))
		}
	}
	return out
}

func hasEnv(c corev1.Container, name string) bool { return slices.Contains(envNames(c), name) }

func envNames(c corev1.Container) []string {
	var out []string
	for _, e := range c.Env {
		out = append(out, e.Name)
	}
	return out
}
