package rollout

import (
	"context"
	"errors"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/toa-deploy/toa-deploy/internal/fault"
	"github.com/toa-deploy/toa-deploy/rollout/status"
)

// 1. A first apply returns when every pod is Ready.
func TestFirstApply(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	objects := slices.Concat(app(t, deploymentSpec{name: "carts", replicas: 3}), app(t, deploymentSpec{name: "orders"}))
	start := time.Now()
	res := c.apply(t, objects...)
	t.Logf("applied and rolled out in %s", time.Since(start).Round(time.Millisecond))
	for _, a := range res.Applied {
		if a.Change != Created {
			t.Errorf("%s: %s, want created", a.Ref, a.Change)
		}
	}
	for composition, want := range map[string]int{"carts": 3, "orders": 2} {
		pods := c.pods(t, composition)
		if len(pods) != want {
			t.Errorf("%s: %d pods, want %d", composition, len(pods), want)
		}
		for _, p := range pods {
			if !ready(&p) {
				t.Errorf("pod %s is not Ready when Wait returned: %+v", p.Name, p.Status.Conditions)
			}
		}
	}
	// the parent Secret, as kubectl writes one
	parent, err := c.cs.CoreV1().Secrets(c.ns).Get(context.Background(), "toa-shop", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the ApplySet parent: %v", err)
	}
	wantAnnotations := map[string]string{
		annotationTooling:   "toa-apply/v0.0.0-test",
		annotationKinds:     "Deployment.apps,Service",
		annotationNamespace: "",
	}
	for k, v := range wantAnnotations {
		if got, ok := parent.Annotations[k]; !ok || got != v {
			t.Errorf("parent annotation %s = %q, want %q", k, got, v)
		}
	}
	id := applySetID("toa-shop", c.ns, "Secret", "")
	if parent.Labels[labelID] != id {
		t.Errorf("parent id %q, want %q", parent.Labels[labelID], id)
	}
	d, err := c.cs.AppsV1().Deployments(c.ns).Get(context.Background(), "composition-carts", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if d.Labels[LabelPartOf] != id {
		t.Errorf("a member's part-of label is %q, want %q", d.Labels[LabelPartOf], id)
	}
	if !slices.ContainsFunc(d.ManagedFields, func(e metav1.ManagedFieldsEntry) bool {
		return e.Manager == FieldManager && e.Operation == metav1.ManagedFieldsOperationApply
	}) {
		t.Errorf("the Deployment has no fields applied by %s: %+v", FieldManager, d.ManagedFields)
	}

	// applied again, nothing changes and nothing is awaited
	res = c.apply(t, objects...)
	for _, a := range res.Applied {
		if a.Change != Unchanged {
			t.Errorf("a second apply: %s %s, want unchanged", a.Ref, a.Change)
		}
	}
}

func ready(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// 2. An image change with 3 replicas and a grace period of 5 s: Wait returns only after the last
// replaced pod is gone; kubectl rollout status, run beside it, returns while they terminate.
func TestWaitForReplacedPods(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	kubectl := kubectl(t, c.kubeconfig)
	spec := deploymentSpec{name: "carts", replicas: 3, grace: 5}
	c.apply(t, app(t, spec)...)

	spec.image = "registry.local/shop/carts:v2"
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	start := time.Now()
	res, err := Apply(ctx, c.k, app(t, spec), c.opts())
	if err != nil {
		t.Fatal(err)
	}
	type kubectlEnd struct {
		at          time.Duration
		terminating int
		out         string
		err         error
	}
	ended := make(chan kubectlEnd, 1)
	go func() {
		out, err := exec.CommandContext(ctx, kubectl, "--kubeconfig", c.kubeconfig, "-n", c.ns,
			"rollout", "status", "deployment/composition-carts", "--timeout", "2m").CombinedOutput()
		at := time.Since(start)
		terminating := 0
		if pods, err := c.cs.CoreV1().Pods(c.ns).List(ctx, metav1.ListOptions{LabelSelector: "toa/composition=carts"}); err == nil {
			for _, p := range pods.Items {
				if p.DeletionTimestamp != nil {
					terminating++
				}
			}
		}
		ended <- kubectlEnd{at, terminating, strings.TrimSpace(string(out)), err}
	}()
	if err := Wait(ctx, c.k, res, WaitOptions{OnStatus: logStatus(t)}); err != nil {
		t.Fatalf("Wait: %v", err)
	}
	waited := time.Since(start)
	pods := c.pods(t, "carts")
	k := <-ended
	if k.err != nil {
		t.Fatalf("kubectl rollout status: %v: %s", k.err, k.out)
	}
	t.Logf("kubectl rollout status returned after %s (%q) with %d replaced pods still terminating",
		k.at.Round(time.Millisecond), k.out, k.terminating)
	t.Logf("Wait returned after %s", waited.Round(time.Millisecond))

	for _, p := range pods {
		if p.DeletionTimestamp != nil {
			t.Errorf("pod %s is still terminating when Wait returned", p.Name)
		}
		if p.Spec.Containers[0].Image != spec.image {
			t.Errorf("pod %s runs %s when Wait returned", p.Name, p.Spec.Containers[0].Image)
		}
	}
	if len(pods) != 3 {
		t.Errorf("%d pods when Wait returned, want 3", len(pods))
	}
	if k.at >= waited {
		t.Errorf("kubectl rollout status returned after Wait (%s >= %s): the grace period did not show", k.at, waited)
	}
	if k.terminating == 0 {
		t.Errorf("no replaced pod was terminating when kubectl rollout status returned")
	}
}

// 3. What the set had and the new render lacks is pruned; what was never the set's is not.
func TestPrune(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	ctx := context.Background()
	carts, orders := app(t, deploymentSpec{name: "carts", grace: 2}), app(t, deploymentSpec{name: "orders", grace: 2})
	c.apply(t, slices.Concat(carts, orders)...)
	// not ours: the same namespace and context, no part-of label
	stranger := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "stranger", Labels: map[string]string{"toa/context": context_}}}
	if _, err := c.cs.CoreV1().ConfigMaps(c.ns).Create(ctx, stranger, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	strangerDeployment := composition(deploymentSpec{name: "stranger", replicas: 1})
	if _, err := c.cs.AppsV1().Deployments(c.ns).Create(ctx, strangerDeployment, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// a dry run says what would go, and nothing goes
	opts := c.opts()
	opts.DryRun = true
	dry, err := Apply(ctx, c.k, carts, opts)
	if err != nil {
		t.Fatal(err)
	}
	if names := refNames(dry.Pruned); names != "deployment.apps/composition-orders service/orders-orders" {
		t.Errorf("a dry run would prune %s", names)
	}
	if _, err := c.cs.AppsV1().Deployments(c.ns).Get(ctx, "composition-orders", metav1.GetOptions{}); err != nil {
		t.Errorf("a dry run pruned: %v", err)
	}

	res := c.apply(t, carts...)
	if names := refNames(res.Pruned); names != "deployment.apps/composition-orders service/orders-orders" {
		t.Errorf("pruned %s", names)
	}
	if _, err := c.cs.AppsV1().Deployments(c.ns).Get(ctx, "composition-orders", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the pruned Deployment is still there when Wait returned: %v", err)
	}
	if _, err := c.cs.CoreV1().Services(c.ns).Get(ctx, "orders-orders", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the pruned Service is still there: %v", err)
	}
	if pods := c.pods(t, "orders"); len(pods) != 0 {
		t.Errorf("%d pods of the pruned Deployment are left when Wait returned", len(pods))
	}
	if _, err := c.cs.CoreV1().ConfigMaps(c.ns).Get(ctx, "stranger", metav1.GetOptions{}); err != nil {
		t.Errorf("a ConfigMap that was never the set's: %v", err)
	}
	if _, err := c.cs.AppsV1().Deployments(c.ns).Get(ctx, "composition-stranger", metav1.GetOptions{}); err != nil {
		t.Errorf("a Deployment that was never the set's: %v", err)
	}
	if pods := c.pods(t, "carts"); len(pods) != 2 {
		t.Errorf("%d pods of the kept Deployment, want 2", len(pods))
	}
}

func refNames(refs []Ref) string {
	var names []string
	for _, r := range refs {
		names = append(names, r.String())
	}
	slices.Sort(names)
	return strings.Join(names, " ")
}

// 4. A new image whose pods crash-loop, or cannot be pulled, fails within 15 s, naming the pod,
// the container and the reason.
func TestFailFast(t *testing.T) {
	t.Parallel()
	for fail, reason := range map[string]string{"crashloop": "CrashLoopBackOff", "imagepull": "ImagePullBackOff"} {
		t.Run(fail, func(t *testing.T) {
			t.Parallel()
			c := newCluster(t)
			spec := deploymentSpec{name: "carts", replicas: 2, grace: 2}
			c.apply(t, app(t, spec)...)

			spec.image, spec.labels = "registry.local/shop/carts:broken", map[string]string{"toa-test/fail": fail}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			start := time.Now()
			res, err := Apply(ctx, c.k, app(t, spec), c.opts())
			if err != nil {
				t.Fatal(err)
			}
			err = Wait(ctx, c.k, res, WaitOptions{OnStatus: logStatus(t)})
			took := time.Since(start)
			t.Logf("failed after %s: %v", took.Round(time.Millisecond), err)
			var f *status.Failure
			if !errors.As(err, &f) {
				t.Fatalf("Wait = %v, want a *status.Failure", err)
			}
			if f.Reason != reason || f.Container != "carts" || !strings.HasPrefix(f.Pod, "composition-carts-") || f.Deployment != "composition-carts" {
				t.Errorf("failure %+v, want %s of container carts in a pod of composition-carts", f, reason)
			}
			for _, part := range []string{f.Pod, "carts", reason} {
				if !strings.Contains(err.Error(), part) {
					t.Errorf("%q does not name %s", err, part)
				}
			}
			if took > 15*time.Second {
				t.Errorf("the failure took %s, more than 15s", took)
			}
		})
	}
}

// 5. A rollout that does not finish in time is a *fault.Timeout naming what was awaited; a pod
// unschedulable past its grace is a failure, seen when the grace ends although nothing changes.
func TestTimeout(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	spec := deploymentSpec{name: "carts", replicas: 2, selector: map[string]string{"toa-test/no-such-node": "true"}}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := Apply(ctx, c.k, app(t, spec), c.opts())
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err = Wait(ctx, c.k, res, WaitOptions{UnschedulableGrace: 3 * time.Second, OnStatus: logStatus(t)})
	took := time.Since(start)
	var f *status.Failure
	if !errors.As(err, &f) || f.Reason != "Unschedulable" || !strings.HasPrefix(f.Pod, "composition-carts-") {
		t.Fatalf("Wait with a grace of 3s = %v, want an Unschedulable failure", err)
	}
	t.Logf("unschedulable failure after %s: %v", took.Round(time.Millisecond), err)
	if took < 1500*time.Millisecond || took > 10*time.Second {
		t.Errorf("the unschedulable failure came after %s, want about the grace of 3s", took)
	}

	short, cancelShort := context.WithTimeout(ctx, 3*time.Second)
	defer cancelShort()
	err = Wait(short, c.k, res, WaitOptions{UnschedulableGrace: time.Minute, OnStatus: logStatus(t)})
	var timeout *fault.Timeout
	var awaiting *Awaiting
	if !errors.As(err, &timeout) || !errors.As(err, &awaiting) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait = %v, want a *fault.Timeout of an *Awaiting", err)
	}
	t.Logf("timeout: %v", err)
	if len(awaiting.Objects) != 1 || awaiting.Objects[0].Name != "composition-carts" || !strings.Contains(err.Error(), "composition-carts: ") {
		t.Errorf("the timeout does not say what was awaited: %+v", awaiting.Objects)
	}
}

// 6. A field another manager owns: a conflict naming the manager and the field; Force takes it.
func TestConflict(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	ctx := context.Background()
	objects := app(t, deploymentSpec{name: "carts", replicas: 2})
	c.apply(t, objects...)

	force := true
	patch := `{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"composition-carts"},"spec":{"replicas":3}}`
	if _, err := c.cs.AppsV1().Deployments(c.ns).Patch(ctx, "composition-carts", types.ApplyPatchType, []byte(patch),
		metav1.PatchOptions{FieldManager: "autoscaler-test", Force: &force}); err != nil {
		t.Fatal(err)
	}
	_, err := Apply(ctx, c.k, objects, c.opts())
	var conflict *ConflictError
	if !errors.As(err, &conflict) {
		t.Fatalf("Apply = %v, want a *ConflictError", err)
	}
	t.Logf("conflict: %v", err)
	if !slices.Contains(conflict.Conflicts, Conflict{Manager: "autoscaler-test", Field: ".spec.replicas"}) {
		t.Errorf("conflicts %+v lack .spec.replicas of autoscaler-test", conflict.Conflicts)
	}
	for _, part := range []string{`"autoscaler-test"`, ".spec.replicas", "--force-conflicts", "composition-carts"} {
		if !strings.Contains(err.Error(), part) {
			t.Errorf("%q does not say %s", err, part)
		}
	}

	opts := c.opts()
	opts.Force = true
	res, err := Apply(ctx, c.k, objects, opts)
	if err != nil {
		t.Fatalf("Apply with Force: %v", err)
	}
	if err := Wait(ctx, c.k, res, WaitOptions{}); err != nil {
		t.Fatal(err)
	}
	d, err := c.cs.AppsV1().Deployments(c.ns).Get(ctx, "composition-carts", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if *d.Spec.Replicas != 2 {
		t.Errorf("replicas %d after Force, want 2", *d.Spec.Replicas)
	}
	for _, e := range d.ManagedFields {
		if e.Manager == "autoscaler-test" && e.FieldsV1 != nil && strings.Contains(e.FieldsV1.GetRawString(), "f:replicas") {
			t.Errorf("autoscaler-test still owns .spec.replicas: %s", e.FieldsV1.GetRawString())
		}
	}
}

// 7. Objects a Helm release wrote with client-side apply are adopted without conflicts, their
// Helm metadata goes, and a field the manifests dropped disappears.
func TestAdoptHelm(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	ctx := context.Background()
	helmMeta := func(m *metav1.ObjectMeta) {
		m.Labels["app.kubernetes.io/managed-by"] = "Helm"
		m.Labels["helm.sh/chart"] = "toa-0.1.0"
		m.Annotations = map[string]string{helmNameAnnotation: "shop", helmNamespaceAnnotation: c.ns, "toa.io/legacy": "yes"}
	}
	helm := metav1.CreateOptions{FieldManager: "helm"}
	old := composition(deploymentSpec{name: "carts", replicas: 2, grace: 2,
		env: []corev1.EnvVar{{Name: "TOA_ENV", Value: "prod"}, {Name: "LEGACY", Value: "1"}}})
	helmMeta(&old.ObjectMeta)
	if _, err := c.cs.AppsV1().Deployments(c.ns).Create(ctx, old, helm); err != nil {
		t.Fatal(err)
	}
	oldService := service("carts")
	helmMeta(&oldService.ObjectMeta)
	if _, err := c.cs.CoreV1().Services(c.ns).Create(ctx, oldService, helm); err != nil {
		t.Fatal(err)
	}
	// an object of the release the application no longer has: not ours, left alone
	extra := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "shop-extra", Labels: map[string]string{}}}
	helmMeta(&extra.ObjectMeta)
	if _, err := c.cs.CoreV1().ConfigMaps(c.ns).Create(ctx, extra, helm); err != nil {
		t.Fatal(err)
	}
	release := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "sh.helm.release.v1.shop.v1",
		Labels: map[string]string{"owner": "helm", "name": "shop", "status": "deployed", "version": "1"}},
		Type: helmReleaseType, Data: map[string][]byte{"release": []byte("H4sI")}}
	if _, err := c.cs.CoreV1().Secrets(c.ns).Create(ctx, release, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// the new manifests: another image (a field Helm's manager owns), no LEGACY, no Helm metadata
	objects := app(t, deploymentSpec{name: "carts", replicas: 2, grace: 2, image: "registry.local/shop/carts:v2",
		env: []corev1.EnvVar{{Name: "TOA_ENV", Value: "prod"}}})
	res := c.apply(t, objects...)
	if names := refNames(res.Adopted); names != "deployment.apps/composition-carts service/carts-carts" {
		t.Errorf("adopted %s", names)
	}
	if len(res.Helm) != 1 || res.Helm[0].Name != "shop" || !slices.Equal(res.Helm[0].Secrets, []string{"sh.helm.release.v1.shop.v1"}) {
		t.Errorf("Helm releases reported: %+v", res.Helm)
	}

	d, err := c.cs.AppsV1().Deployments(c.ns).Get(ctx, "composition-carts", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s, err := c.cs.CoreV1().Services(c.ns).Get(ctx, "carts-carts", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []metav1.ObjectMeta{d.ObjectMeta, s.ObjectMeta} {
		for _, k := range []string{"app.kubernetes.io/managed-by", "helm.sh/chart"} {
			if _, ok := m.Labels[k]; ok {
				t.Errorf("%s keeps Helm's label %s", m.Name, k)
			}
		}
		for _, k := range []string{helmNameAnnotation, helmNamespaceAnnotation, "toa.io/legacy"} {
			if _, ok := m.Annotations[k]; ok {
				t.Errorf("%s keeps the annotation %s", m.Name, k)
			}
		}
		for _, e := range m.ManagedFields {
			if e.Manager == "helm" {
				t.Errorf("%s: helm still manages fields: %s", m.Name, e.FieldsV1.GetRawString())
			}
		}
		if m.Labels[LabelPartOf] != res.Set.ID {
			t.Errorf("%s is not a member of the set", m.Name)
		}
	}
	env := d.Spec.Template.Spec.Containers[0].Env
	if len(env) != 1 || env[0].Name != "TOA_ENV" {
		t.Errorf("env after the adoption: %+v, want TOA_ENV alone", env)
	}
	if img := d.Spec.Template.Spec.Containers[0].Image; img != "registry.local/shop/carts:v2" {
		t.Errorf("image %s", img)
	}
	if cm, err := c.cs.CoreV1().ConfigMaps(c.ns).Get(ctx, "shop-extra", metav1.GetOptions{}); err != nil || cm.Labels["app.kubernetes.io/managed-by"] != "Helm" {
		t.Errorf("the release's object the application lacks was touched: %v %v", cm.Labels, err)
	}
	if _, err := c.cs.CoreV1().Secrets(c.ns).Get(ctx, release.Name, metav1.GetOptions{}); err != nil {
		t.Errorf("the release Secret: %v", err)
	}
}

// 8. Delete leaves nothing of the application, and what is not its.
func TestDelete(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	ctx := context.Background()
	objects := slices.Concat(app(t, deploymentSpec{name: "carts", grace: 3}), app(t, deploymentSpec{name: "orders", grace: 3}))
	c.apply(t, objects...)
	stranger := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "stranger"}}
	if _, err := c.cs.CoreV1().ConfigMaps(c.ns).Create(ctx, stranger, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	res, err := Delete(ctx, c.k, objects, c.opts())
	if err != nil {
		t.Fatalf("Delete: %v", err)
	}
	t.Logf("deleted %s in %s", refNames(res.Deleted), time.Since(start).Round(time.Millisecond))
	if len(res.Deleted) != 4 {
		t.Errorf("deleted %d objects, want 4", len(res.Deleted))
	}
	deployments, _ := c.cs.AppsV1().Deployments(c.ns).List(ctx, metav1.ListOptions{})
	rss, _ := c.cs.AppsV1().ReplicaSets(c.ns).List(ctx, metav1.ListOptions{})
	pods, _ := c.cs.CoreV1().Pods(c.ns).List(ctx, metav1.ListOptions{})
	services, _ := c.cs.CoreV1().Services(c.ns).List(ctx, metav1.ListOptions{})
	for what, n := range map[string]int{"deployments": len(deployments.Items), "replicasets": len(rss.Items),
		"pods": len(pods.Items), "services": len(services.Items)} {
		if n != 0 {
			t.Errorf("%d %s left after Delete", n, what)
		}
	}
	if _, err := c.cs.CoreV1().Secrets(c.ns).Get(ctx, "toa-shop", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the parent Secret after Delete: %v", err)
	}
	if _, err := c.cs.CoreV1().ConfigMaps(c.ns).Get(ctx, "stranger", metav1.GetOptions{}); err != nil {
		t.Errorf("Delete touched what was never the application's: %v", err)
	}
}

// A server-side dry run says what would change and changes nothing.
func TestDryRun(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	ctx := context.Background()
	objects := app(t, deploymentSpec{name: "carts"})
	opts := c.opts()
	opts.DryRun = true
	res, err := Apply(ctx, c.k, objects, opts)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range res.Applied {
		if a.Change != Created {
			t.Errorf("dry run: %s %s, want created", a.Ref, a.Change)
		}
	}
	if err := Wait(ctx, c.k, res, WaitOptions{}); err != nil {
		t.Errorf("Wait after a dry run: %v", err)
	}
	if list, _ := c.cs.AppsV1().Deployments(c.ns).List(ctx, metav1.ListOptions{}); len(list.Items) != 0 {
		t.Error("a dry run created a Deployment")
	}
	if _, err := c.cs.CoreV1().Secrets(c.ns).Get(ctx, "toa-shop", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("a dry run wrote the parent: %v", err)
	}

	c.apply(t, objects...)
	changed := app(t, deploymentSpec{name: "carts", image: "registry.local/shop/carts:v2"})
	res, err = Apply(ctx, c.k, changed, opts)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]Change{}
	for _, a := range res.Applied {
		got[a.Ref.String()] = a.Change
	}
	if got["deployment.apps/composition-carts"] != Configured || got["service/carts-carts"] != Unchanged {
		t.Errorf("dry run of an image change: %v", got)
	}
	d, err := c.cs.AppsV1().Deployments(c.ns).Get(ctx, "composition-carts", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if img := d.Spec.Template.Spec.Containers[0].Image; img != "registry.local/shop/carts:v1" {
		t.Errorf("a dry run changed the image to %s", img)
	}
}

// CRDs come first and are established before the objects of their kinds are applied; the set
// records cluster-scoped members, and Delete removes them.
func TestCRD(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	ctx := context.Background()
	group := c.ns + ".toa-test.io"
	crd := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
		"metadata": map[string]any{"name": "widgets." + group, "labels": map[string]any{"toa/context": context_}},
		"spec": map[string]any{
			"group": group, "scope": "Namespaced",
			"names": map[string]any{"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
			"versions": []any{map[string]any{"name": "v1", "served": true, "storage": true,
				"schema": map[string]any{"openAPIV3Schema": map[string]any{"type": "object",
					"properties": map[string]any{"spec": map[string]any{"type": "object",
						"properties": map[string]any{"size": map[string]any{"type": "integer"}}}}}}}},
		},
	}}
	widget := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": group + "/v1", "kind": "Widget",
		"metadata": map[string]any{"name": "w", "labels": map[string]any{"toa/context": context_}},
		"spec":     map[string]any{"size": int64(3)},
	}}
	t.Cleanup(func() {
		// the CRD is cluster-scoped: the namespace's deletion does not take it
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := Delete(ctx, c.k, []*unstructured.Unstructured{crd}, c.opts()); err != nil {
			t.Errorf("delete the CRD: %v", err)
		}
	})
	// the Widget first: Apply orders
	objects := slices.Concat([]*unstructured.Unstructured{widget, crd}, app(t, deploymentSpec{name: "carts", replicas: 1}))
	res := c.apply(t, objects...)
	var order []string
	for _, a := range res.Applied {
		order = append(order, a.Kind)
	}
	if strings.Join(order, " ") != "CustomResourceDefinition Service Deployment Widget" {
		t.Errorf("applied in the order %v", order)
	}
	parent, err := c.cs.CoreV1().Secrets(c.ns).Get(ctx, "toa-shop", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := "CustomResourceDefinition.apiextensions.k8s.io,Deployment.apps,Service,Widget." + group
	if got := parent.Annotations[annotationKinds]; got != want {
		t.Errorf("contains-group-kinds = %q, want %q", got, want)
	}

	start := time.Now()
	del, err := Delete(ctx, c.k, objects, c.opts())
	if err != nil {
		t.Fatalf("Delete: %v", err)
	}
	t.Logf("deleted in %s", time.Since(start).Round(time.Millisecond))
	if got := refNames(del.Deleted); !strings.Contains(got, "customresourcedefinition.apiextensions.k8s.io/widgets."+group) ||
		!strings.Contains(got, "widget."+group+"/w") {
		t.Errorf("deleted %s", got)
	}
}

// 12. An apply the API server refuses part-way says the application is partly applied and names
// what it did not reach; nothing is pruned, and the earlier application's objects stay.
func TestPartlyApplied(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	ctx := context.Background()
	c.apply(t, app(t, deploymentSpec{name: "carts", replicas: 1})...)

	broken := service("prices")
	broken.Spec.Ports[0].Port = 99999 // the API server refuses it
	objects := append(app(t, deploymentSpec{name: "orders", replicas: 1}), u(t, broken))
	res, err := Apply(ctx, c.k, objects, c.opts())
	var partly *PartlyAppliedError
	if !errors.As(err, &partly) {
		t.Fatalf("Apply = %v, want a *PartlyAppliedError", err)
	}
	t.Logf("partly applied: %v", err)
	if fault.ClassOf(err) != fault.ClassInput {
		t.Errorf("class %v, want the refusal's (bad input)", fault.ClassOf(err))
	}
	var notApplied []string
	for _, r := range res.NotApplied {
		notApplied = append(notApplied, r.String())
	}
	slices.Sort(notApplied)
	if want := []string{"deployment.apps/composition-orders", "service/prices-prices"}; !slices.Equal(notApplied, want) {
		t.Errorf("not applied %v, want %v", notApplied, want)
	}
	for _, part := range []string{"partly applied: 1 of 3 objects applied", "deployment.apps/composition-orders", "nothing was pruned", "port: Invalid value: 99999"} {
		if !strings.Contains(err.Error(), part) {
			t.Errorf("%q does not say %q", err, part)
		}
	}
	if len(res.Pruned) != 0 {
		t.Errorf("pruned %v after a partial apply", res.Pruned)
	}
	if _, err := c.cs.AppsV1().Deployments(c.ns).Get(ctx, "composition-carts", metav1.GetOptions{}); err != nil {
		t.Errorf("the earlier application's Deployment: %v", err)
	}
}
