package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/toa-deploy/toa-deploy/internal/harness"
)

// The stand-in runtime's times on the real node: the probe opens a second after the start, and
// a SIGTERM is answered three seconds later, after the manifests' preStop `sleep 5`.
const (
	realStartDelay = "1"
	realStopDelay  = "3"
	preStopSeconds = 5
)

// On the control plane's real node (a kubelet and containerd, internal/harness/realnode.go),
// toa-push then toa-apply of testdata/apps/pushed: the apply returns when the pods are Ready by
// their readiness probe; after a code change it returns only once the replaced pods' containers
// have exited (their end time as the kubelet reports it); a rollout whose new pods crash is
// reported with the kubelet's last state and events, and --rollback-on-failure brings the
// previous pods back Ready.
func TestRealNode(t *testing.T) {
	if testing.Short() {
		t.Skip("needs a registry, npm and the control plane's real node")
	}
	if os.Getenv("TOA_TEST_NO_CLUSTER") == "1" {
		t.Skip("TOA_TEST_NO_CLUSTER=1: no control plane")
	}
	kubeconfig := harness.Kubeconfig(t)
	harness.RealNode(t, kubeconfig)
	cs := clientsetFor(t, kubeconfig)
	namespace := harness.Namespace(t, kubeconfig)
	apply := buildApply(t)

	addr := harness.Registry(t)
	harness.PushTestBase(t, addr)
	dir := copyApp(t, "pushed", addr)
	cache := t.TempDir()
	deployment := filepath.Join(dir, "deployment")
	env := map[string]string{"TOA_STANDIN_START_DELAY": realStartDelay, "TOA_STANDIN_STOP_DELAY": realStopDelay}
	overlay := harness.RealNodeOverlay(t, deployment, env)

	first := pushUnread(t, dir, cache).out
	createSecrets(t, cs, apply, overlay, namespace)
	seen := watchPods(t, cs, namespace)

	ok := t.Run("1 the apply returns when the pods are Ready by their probe", func(t *testing.T) {
		code, out, took := applyTo(t, apply, overlay, namespace, "--timeout", "3m")
		t.Logf("toa-apply: exit %d in %s", code, took.Round(time.Millisecond))
		if code != 0 {
			t.Fatalf("toa-apply exited %d:\n%s", code, out)
		}
		pods := deploymentPods(t, cs, namespace, "composition-front")
		if len(pods) == 0 {
			t.Fatal("no pods of composition-front")
		}
		for _, p := range pods {
			checkReadyByProbe(t, p, first.Images[0].Reference)
		}
	})
	if !ok {
		return
	}

	ok = t.Run("2 after a code change the apply returns only once the replaced pods have exited", func(t *testing.T) {
		old := deploymentPods(t, cs, namespace, "composition-front")
		appendLine(t, filepath.Join(dir, "components/shop.orders/operations.js"), "// a change the pods must be replaced for\n")
		changed := pushUnread(t, dir, cache).out
		if changed.Images[0].Digest == first.Images[0].Digest {
			t.Fatalf("the code change built no new image: %+v", changed.Images[0])
		}
		code, out, took := applyTo(t, apply, overlay, namespace, "--timeout", "3m")
		returned := time.Now()
		t.Logf("toa-apply: exit %d in %s", code, took.Round(time.Millisecond))
		if code != 0 {
			t.Fatalf("toa-apply exited %d:\n%s", code, out)
		}
		for _, p := range old {
			if now, err := cs.CoreV1().Pods(namespace).Get(t.Context(), p.Name, metav1.GetOptions{}); err == nil && now.UID == p.UID {
				t.Errorf("the replaced pod %s still exists (deleting since %v)", p.Name, now.DeletionTimestamp)
			} else if err != nil && !apierrors.IsNotFound(err) {
				t.Fatal(err)
			}
			end, ok := seen.terminated(p.UID)
			if !ok {
				t.Errorf("the kubelet reported no end of pod %s's container before it was gone", p.Name)
				continue
			}
			deleted := seen.deletion(p.UID)
			t.Logf("pod %s: deleted at %s, its container exited %d (%s) at %s, %s later; toa-apply returned %s after",
				p.Name, deleted.Format(time.TimeOnly), end.ExitCode, end.Reason, end.FinishedAt.Format(time.TimeOnly),
				end.FinishedAt.Sub(deleted), returned.Sub(end.FinishedAt.Time).Round(time.Millisecond))
			if end.FinishedAt.Time.After(returned) {
				t.Errorf("toa-apply returned at %s, before pod %s's container exited at %s", returned, p.Name, end.FinishedAt)
			}
			if end.ExitCode != 0 {
				t.Errorf("pod %s's container exited %d (%s), want 0: a graceful stop within the grace period", p.Name, end.ExitCode, end.Reason)
			}
			// preStop's sleep, then SIGTERM and the runtime's delay: seconds, as the timestamps count them
			if min := time.Duration(preStopSeconds+3-1) * time.Second; !deleted.IsZero() && end.FinishedAt.Sub(deleted) < min {
				t.Errorf("pod %s's container exited %s after the deletion, want at least %s (preStop and the stop delay)",
					p.Name, end.FinishedAt.Sub(deleted), min)
			}
		}
		for _, p := range deploymentPods(t, cs, namespace, "composition-front") {
			checkReadyByProbe(t, p, changed.Images[0].Reference)
		}
	})
	if !ok {
		return
	}

	t.Run("3 a crash loop is reported with the kubelet's last state, and rolled back", func(t *testing.T) {
		before := deploymentPods(t, cs, namespace, "composition-front")
		crashEnv := map[string]string{"TOA_STANDIN_EXIT_CODE": "3"}
		for k, v := range env {
			crashEnv[k] = v
		}
		crashing := harness.RealNodeOverlay(t, deployment, crashEnv)
		code, out, took := applyTo(t, apply, crashing, namespace, "--timeout", "90s", "--rollback-on-failure")
		t.Logf("toa-apply --rollback-on-failure: exit %d in %s:\n%s", code, took.Round(time.Millisecond), out)
		if code != 1 {
			t.Errorf("exit %d, want 1 (the rollout failed)", code)
		}
		for _, want := range []string{"CrashLoopBackOff", "last state: terminated, exit code 3 (Error)", "BackOff", "Back-off restarting failed container",
			"rolled back to revision"} {
			if !strings.Contains(out, want) {
				t.Errorf("toa-apply said no %q", want)
			}
		}
		pods := deploymentPods(t, cs, namespace, "composition-front")
		if len(pods) != len(before) {
			t.Errorf("%d pods after the rollback, want %d", len(pods), len(before))
		}
		for _, p := range pods {
			if hasEnvValue(p.Spec.Containers[0], "TOA_STANDIN_EXIT_CODE") {
				t.Errorf("pod %s is of the crashing template", p.Name)
			}
			checkReadyByProbe(t, p, before[0].Spec.Containers[0].Image)
		}
	})
}

// applyTo runs toa-apply on a kustomization into the namespace, as a user would, and returns its
// exit code, what it printed and how long it took.
func applyTo(t *testing.T, apply, kustomization, namespace string, args ...string) (int, string, time.Duration) {
	t.Helper()
	cmd := exec.Command(apply, append([]string{kustomization, "-n", namespace}, args...)...)
	cmd.Env = append(os.Environ(), "CI=true")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	began := time.Now()
	err := cmd.Run()
	took := time.Since(began)
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0, out.String(), took
	case errors.As(err, &exit):
		return exit.ExitCode(), out.String(), took
	}
	t.Fatalf("run toa-apply: %v", err)
	return 0, "", 0
}

// createSecrets creates the Secrets the rendered kustomization's workloads read, each key with a
// value, as a user does before the first deploy (kubectl create secret generic).
func createSecrets(t *testing.T, cs *kubernetes.Clientset, apply, kustomization, namespace string) {
	t.Helper()
	out, err := exec.Command(apply, kustomization, "--render").Output()
	if err != nil {
		t.Fatalf("toa-apply --render: %v", err)
	}
	keys := map[string]map[string][]byte{}
	dec := yaml.NewYAMLOrJSONDecoder(bufio.NewReader(bytes.NewReader(out)), 4096)
	for {
		var d appsv1.Deployment
		if err := dec.Decode(&d); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("read what toa-apply rendered: %v", err)
		}
		if d.Kind != "Deployment" {
			continue
		}
		for _, c := range d.Spec.Template.Spec.Containers {
			for _, e := range c.Env {
				if ref := e.ValueFrom; ref != nil && ref.SecretKeyRef != nil {
					if keys[ref.SecretKeyRef.Name] == nil {
						keys[ref.SecretKeyRef.Name] = map[string][]byte{}
					}
					keys[ref.SecretKeyRef.Name][ref.SecretKeyRef.Key] = []byte("test-" + ref.SecretKeyRef.Key)
				}
			}
		}
	}
	for name, data := range keys {
		_, err := cs.CoreV1().Secrets(namespace).Create(t.Context(), &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: name}, Data: data}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("create Secret %s: %v", name, err)
		}
		t.Logf("created Secret %s with keys %d", name, len(data))
	}
}

// deploymentPods are the pods of a Deployment's current ReplicaSet that are not being deleted.
func deploymentPods(t *testing.T, cs *kubernetes.Clientset, namespace, name string) []corev1.Pod {
	t.Helper()
	d := getDeployment(t, cs, namespace, name)
	selector := metav1.FormatLabelSelector(d.Spec.Selector)
	list, err := cs.CoreV1().Pods(namespace).List(t.Context(), metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		t.Fatal(err)
	}
	var out []corev1.Pod
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil {
			out = append(out, p)
		}
	}
	return out
}

// checkReadyByProbe checks that a pod runs image on the real node, is Ready, and turned Ready
// by its readiness probe: the probe is there, and Ready came after the runtime's start delay.
func checkReadyByProbe(t *testing.T, p corev1.Pod, image string) {
	t.Helper()
	if p.Spec.NodeName != harness.RealNodeName {
		t.Errorf("pod %s is on node %q, want %s", p.Name, p.Spec.NodeName, harness.RealNodeName)
	}
	c := p.Spec.Containers[0]
	if c.Image != image {
		t.Errorf("pod %s runs %s, want %s", p.Name, c.Image, image)
	}
	if c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet == nil {
		t.Fatalf("pod %s's container has no HTTP readiness probe", p.Name)
	}
	var ready *corev1.PodCondition
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].Type == corev1.PodReady {
			ready = &p.Status.Conditions[i]
		}
	}
	if ready == nil || ready.Status != corev1.ConditionTrue {
		t.Errorf("pod %s is not Ready: %+v", p.Name, p.Status.Conditions)
		return
	}
	if len(p.Status.ContainerStatuses) != 1 || p.Status.ContainerStatuses[0].State.Running == nil || !p.Status.ContainerStatuses[0].Ready {
		t.Errorf("pod %s's container: %+v", p.Name, p.Status.ContainerStatuses)
		return
	}
	started := p.Status.ContainerStatuses[0].State.Running.StartedAt
	t.Logf("pod %s (%s): started %s, Ready %s, probed on port %s at %s", p.Name, p.Status.PodIP,
		started.Format(time.TimeOnly), ready.LastTransitionTime.Format(time.TimeOnly),
		c.ReadinessProbe.HTTPGet.Port.String(), c.ReadinessProbe.HTTPGet.Path)
	if ready.LastTransitionTime.Before(&started) {
		t.Errorf("pod %s turned Ready at %s, before its container started at %s", p.Name, ready.LastTransitionTime, started)
	}
}

func hasEnvValue(c corev1.Container, name string) bool {
	for _, e := range c.Env {
		if e.Name == name {
			return true
		}
	}
	return false
}

// podsSeen is what a watch of a namespace's pods saw of each: when it was deleted, and the
// kubelet's last word on its first container's end.
type podsSeen struct {
	sync.Mutex
	ended   map[types.UID]corev1.ContainerStateTerminated
	deleted map[types.UID]time.Time
}

func (s *podsSeen) terminated(uid types.UID) (corev1.ContainerStateTerminated, bool) {
	s.Lock()
	defer s.Unlock()
	end, ok := s.ended[uid]
	return end, ok
}

func (s *podsSeen) deletion(uid types.UID) time.Time {
	s.Lock()
	defer s.Unlock()
	return s.deleted[uid]
}

// watchPods watches the namespace's pods until the test ends.
func watchPods(t *testing.T, cs *kubernetes.Clientset, namespace string) *podsSeen {
	t.Helper()
	seen := &podsSeen{ended: map[types.UID]corev1.ContainerStateTerminated{}, deleted: map[types.UID]time.Time{}}
	ctx, cancel := context.WithCancel(context.Background())
	w, err := cs.CoreV1().Pods(namespace).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("watch the pods of %s: %v", namespace, err)
	}
	done := make(chan struct{})
	t.Cleanup(func() {
		cancel()
		w.Stop()
		<-done
	})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			p, ok := ev.Object.(*corev1.Pod)
			if !ok || ev.Type == watch.Error {
				continue
			}
			seen.Lock()
			if _, known := seen.deleted[p.UID]; p.DeletionTimestamp != nil && !known {
				// the deletion's start: its timestamp less the grace period the kubelet was given
				grace := int64(0)
				if p.DeletionGracePeriodSeconds != nil {
					grace = *p.DeletionGracePeriodSeconds
				}
				seen.deleted[p.UID] = p.DeletionTimestamp.Add(-time.Duration(grace) * time.Second)
			}
			for _, c := range p.Status.ContainerStatuses {
				if c.State.Terminated != nil && p.DeletionTimestamp != nil {
					seen.ended[p.UID] = *c.State.Terminated
				}
			}
			seen.Unlock()
		}
	}()
	return seen
}
