package rollout

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"

	kube "github.com/toa-deploy/toa-deploy/internal/cluster"
)

// requests counts what a client asked of the API server, by "VERB resource", and the answers
// by status.
type requests struct {
	mu       sync.Mutex
	byKind   map[string]int
	byStatus map[int]int
}

func (r *requests) reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.byKind, r.byStatus = map[string]int{}, map[int]int{}
}

func (r *requests) count(req *http.Request, status int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	verb := req.Method
	if req.URL.Query().Get("watch") == "true" {
		verb = "WATCH"
	}
	r.byKind[verb+" "+resourceOf(req.URL.Path)]++
	r.byStatus[status]++
}

// resourceOf names what a path asks for: "deployments" of a list, "one deployments" of an
// object; discovery paths as they are.
func resourceOf(path string) string {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	switch {
	case len(parts) >= 3 && parts[0] == "api":
		parts = parts[2:]
	case len(parts) >= 4 && parts[0] == "apis":
		parts = parts[3:]
	default:
		return path
	}
	if len(parts) >= 3 && parts[0] == "namespaces" {
		parts = parts[2:]
	}
	if len(parts) == 1 {
		return parts[0]
	}
	return "one " + parts[0]
}

func (r *requests) total() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, v := range r.byKind {
		n += v
	}
	return n
}

func (r *requests) get(key string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.byKind[key]
}

func (r *requests) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var keys []string
	for k := range r.byKind {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%4d %s\n", r.byKind[k], k)
	}
	return b.String()
}

type countingTransport struct {
	next http.RoundTripper
	r    *requests
}

func (t countingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(req)
	status := 0
	if resp != nil {
		status = resp.StatusCode
	}
	t.r.count(req, status)
	return resp, err
}

// counted is the run's client as toa-apply builds it, of cfg, with every request it sends counted.
func counted(t *testing.T, cfg *rest.Config) (*kube.Client, *requests) {
	t.Helper()
	r := &requests{}
	r.reset()
	cfg = rest.CopyConfig(cfg)
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { return countingTransport{next: rt, r: r} }
	k, err := kube.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return k, r
}

// settings is a ConfigMap of a composition, as an application keeps its settings.
func settings(name string) *corev1.ConfigMap {
	return &corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Name: "config-" + name, Labels: map[string]string{"toa/context": context_}},
		Data:       map[string]string{"LOG_LEVEL": "info"}}
}

// compositions are n compositions of one replica: a Deployment, a Service and a ConfigMap each.
func compositions(t *testing.T, n int, image string) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for i := range n {
		name := fmt.Sprintf("c%02d", i)
		s := deploymentSpec{name: name, replicas: 1, grace: 1}
		if image != "" {
			s.image = image + name
		}
		out = append(out, app(t, s)...)
		out = append(out, u(t, settings(name)))
	}
	return out
}

// One request per object: an apply sends a PATCH per object and one LIST per kind and namespace,
// no GET per object, and says what each PATCH did from its answer; the wait watches each kind
// once per namespace, not pods and ReplicaSets once per Deployment.
func TestRequestsPerObject(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	k, r := counted(t, c.cfg)
	const n = 20
	objects := compositions(t, n, "")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// lists is how many LISTs of each kind: the set's members, and the metadata of all when some
	// object is not a member yet
	run := func(what string, objects []*unstructured.Unstructured, lists int) (*Result, int, int) {
		t.Helper()
		r.reset()
		res, err := Apply(ctx, k, objects, c.opts())
		if err != nil {
			t.Fatalf("%s: Apply: %v", what, err)
		}
		applied := r.total()
		t.Logf("%s: the apply's %d requests for %d objects:\n%s", what, applied, len(objects), r)
		if got := r.get("PATCH one deployments") + r.get("PATCH one services") + r.get("PATCH one configmaps"); got != len(objects) {
			t.Errorf("%s: %d PATCHes of the objects, want one each: %d", what, got, len(objects))
		}
		for _, resource := range []string{"deployments", "services", "configmaps"} {
			if got := r.get("GET one " + resource); got != 0 {
				t.Errorf("%s: %d GETs of %s, want none", what, got, resource)
			}
			if got := r.get("GET " + resource); got != lists {
				t.Errorf("%s: %d LISTs of %s, want %d", what, got, resource, lists)
			}
		}
		r.reset()
		if err := Wait(ctx, k, res, WaitOptions{OnStatus: logStatus(t)}); err != nil {
			t.Fatalf("%s: Wait: %v", what, err)
		}
		t.Logf("%s: the wait's %d requests:\n%s", what, r.total(), r)
		for _, watched := range []string{"deployments", "replicasets", "pods"} {
			if got := r.get("WATCH " + watched); got > 1 {
				t.Errorf("%s: %d watches of %s for %d Deployments, want one", what, got, watched, n)
			}
		}
		if got := r.get("GET one events") + r.get("GET events"); got != 0 {
			t.Errorf("%s: %d requests of Events, where nothing failed", what, got)
		}
		return res, applied, r.total()
	}
	changes := func(res *Result) map[Change]int {
		out := map[Change]int{}
		for _, a := range res.Applied {
			out[a.Change]++
		}
		return out
	}

	res, _, _ := run("first apply", objects, 2)
	if got := changes(res); got[Created] != len(objects) {
		t.Errorf("first apply: %v, want %d created", got, len(objects))
	}
	res, applied, waited := run("no change", objects, 1)
	if got := changes(res); got[Unchanged] != len(objects) {
		t.Errorf("no change: %v, want %d unchanged", got, len(objects))
	}
	// at most 1.1 requests an object, and a few a kind: the parent read and written twice, a
	// LIST and a watch of each kind, the namespace's pods and ReplicaSets
	if limit := len(objects)*11/10 + 3*3; applied+waited > limit {
		t.Errorf("no change: %d requests (%d to apply, %d to wait) for %d objects of 3 kinds, want at most %d", applied+waited, applied, waited, len(objects), limit)
	}
	changed := slices.Clone(objects)
	changed[0] = u(t, composition(deploymentSpec{name: "c00", replicas: 1, grace: 1, image: "registry.local/shop/c00:v2"}))
	res, _, _ = run("one image changed", changed, 1)
	if got := changes(res); got[Configured] != 1 || got[Unchanged] != len(objects)-1 {
		t.Errorf("one image changed: %v, want 1 configured and %d unchanged", got, len(objects)-1)
	}
}

// The API server's pace, not ours: a user whose priority level the server keeps to one seat
// and a queue of none (API Priority and Fairness answers 429 with Retry-After past it) still
// applies and rolls out, each refused request sent again after the wait the server asked.
func TestServerPace(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	user := "toa-test-throttled-" + c.ns
	zero := int32(0)
	one := int32(1)
	levels, schemas := c.cs.FlowcontrolV1().PriorityLevelConfigurations(), c.cs.FlowcontrolV1().FlowSchemas()
	level := &flowcontrolv1.PriorityLevelConfiguration{ObjectMeta: metav1.ObjectMeta{Name: user},
		Spec: flowcontrolv1.PriorityLevelConfigurationSpec{Type: flowcontrolv1.PriorityLevelEnablementLimited,
			Limited: &flowcontrolv1.LimitedPriorityLevelConfiguration{NominalConcurrencyShares: &one,
				LendablePercent: &zero, BorrowingLimitPercent: &zero,
				LimitResponse: flowcontrolv1.LimitResponse{Type: flowcontrolv1.LimitResponseTypeReject}}}}
	schema := &flowcontrolv1.FlowSchema{ObjectMeta: metav1.ObjectMeta{Name: user},
		Spec: flowcontrolv1.FlowSchemaSpec{PriorityLevelConfiguration: flowcontrolv1.PriorityLevelConfigurationReference{Name: user},
			MatchingPrecedence: 1000,
			Rules: []flowcontrolv1.PolicyRulesWithSubjects{{
				Subjects:         []flowcontrolv1.Subject{{Kind: flowcontrolv1.SubjectKindUser, User: &flowcontrolv1.UserSubject{Name: user}}},
				ResourceRules:    []flowcontrolv1.ResourcePolicyRule{{Verbs: []string{"*"}, APIGroups: []string{"*"}, Resources: []string{"*"}, Namespaces: []string{"*"}, ClusterScope: true}},
				NonResourceRules: []flowcontrolv1.NonResourcePolicyRule{{Verbs: []string{"*"}, NonResourceURLs: []string{"*"}}},
			}}}}
	if _, err := levels.Create(ctx, level, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = levels.Delete(context.Background(), user, metav1.DeleteOptions{}) })
	if _, err := schemas.Create(ctx, schema, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = schemas.Delete(context.Background(), user, metav1.DeleteOptions{}) })
	binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "throttled"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "admin"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: "rbac.authorization.k8s.io", Name: user}}}
	if _, err := c.cs.RbacV1().RoleBindings(c.ns).Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// the API server takes a moment to see a new FlowSchema
	cfg := rest.CopyConfig(c.cfg)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	k, r := counted(t, cfg)
	for deadline := time.Now().Add(30 * time.Second); !schemaSeen(ctx, c, user); time.Sleep(200 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the API server did not take flowschema/%s in within 30 s", user)
		}
	}

	objects := compositions(t, 5, "")
	r.reset()
	start := time.Now()
	res, err := Apply(ctx, k, objects, c.opts())
	if err != nil {
		t.Fatalf("Apply at one seat: %v", err)
	}
	if err := Wait(ctx, k, res, WaitOptions{OnStatus: logStatus(t)}); err != nil {
		t.Fatalf("Wait at one seat: %v", err)
	}
	t.Logf("applied %d objects and rolled out in %s at one seat: answers %v\n%s", len(objects), time.Since(start).Round(time.Millisecond), r.byStatus, r)
	r.mu.Lock()
	refused := r.byStatus[http.StatusTooManyRequests]
	r.mu.Unlock()
	if refused == 0 {
		t.Errorf("the server refused no request at one seat and no queue: the test did not throttle")
	}
}

// schemaSeen says whether the API server has taken the FlowSchema in: its status says so.
func schemaSeen(ctx context.Context, c *cluster, name string) bool {
	fs, err := c.cs.FlowcontrolV1().FlowSchemas().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return false
	}
	for _, cond := range fs.Status.Conditions {
		if cond.Type == flowcontrolv1.FlowSchemaConditionDangling && cond.Status == flowcontrolv1.ConditionFalse {
			return true
		}
	}
	return false
}
