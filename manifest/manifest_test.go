package manifest

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/toa-deploy/toa-deploy/internal/app/toa"
	"github.com/toa-deploy/toa-deploy/internal/fault"
	"github.com/toa-deploy/toa-deploy/internal/push/image"
)

// The chart's behaviour, point by point: reference §5.4.1, §5.4.4 and §5.6, and the 289 diff
// (seeds/000: strategy, probes, heap).

func TestCompositionIsTheChartsDeployment(t *testing.T) {
	app, images := edge(&toa.Resources{CPU: &toa.Pair{Request: "100m", Limit: "1"}, Memory: &toa.Pair{Request: "100Mi", Limit: "1Gi"}})
	app.Registry.Credentials = "regcred"
	d := deploymentOf(t, app, images, "composition-edge")

	if d.APIVersion != "apps/v1" || d.Kind != "Deployment" {
		t.Errorf("type: %s %s", d.APIVersion, d.Kind)
	}
	if len(d.Labels) != 0 || len(d.Annotations) != 0 || d.Namespace != "" {
		t.Errorf("metadata beyond the name: %+v", d.ObjectMeta)
	}
	if *d.Spec.Replicas != 2 {
		t.Errorf("replicas: %d, want the chart's default 2", *d.Spec.Replicas)
	}
	if *d.Spec.ProgressDeadlineSeconds != 900 {
		t.Errorf("progressDeadlineSeconds: %d", *d.Spec.ProgressDeadlineSeconds)
	}
	s := d.Spec.Strategy
	if s.Type != appsv1.RollingUpdateDeploymentStrategyType || s.RollingUpdate.MaxUnavailable.String() != "0" ||
		s.RollingUpdate.MaxUnavailable.Type != intstr.Int || s.RollingUpdate.MaxSurge.String() != "100%" {
		t.Errorf("strategy: %+v %+v", s, s.RollingUpdate)
	}
	selector := map[string]string{"toa/composition": "edge"}
	if !reflect.DeepEqual(d.Spec.Selector.MatchLabels, selector) || len(d.Spec.Selector.MatchExpressions) != 0 {
		t.Errorf("selector: %+v", d.Spec.Selector)
	}
	want := map[string]string{"toa/composition": "edge", "toa/component-todos-tasks": "1", "toa/component-todos-stats": "1"}
	if !reflect.DeepEqual(d.Spec.Template.Labels, want) {
		t.Errorf("pod labels: %v, want %v", d.Spec.Template.Labels, want)
	}
	pod := d.Spec.Template.Spec
	if *pod.TerminationGracePeriodSeconds != 45 {
		t.Errorf("terminationGracePeriodSeconds: %d", *pod.TerminationGracePeriodSeconds)
	}
	if !reflect.DeepEqual(pod.ImagePullSecrets, []corev1.LocalObjectReference{{Name: "regcred"}}) {
		t.Errorf("imagePullSecrets: %v", pod.ImagePullSecrets)
	}
	if len(pod.TopologySpreadConstraints) != 1 {
		t.Fatalf("topologySpreadConstraints: %v", pod.TopologySpreadConstraints)
	}
	tsc := pod.TopologySpreadConstraints[0]
	if tsc.MaxSkew != 1 || tsc.TopologyKey != "kubernetes.io/hostname" || tsc.WhenUnsatisfiable != corev1.ScheduleAnyway ||
		!reflect.DeepEqual(tsc.LabelSelector.MatchLabels, selector) || len(tsc.MatchLabelKeys) != 0 {
		t.Errorf("topology spread: %+v", tsc)
	}
	if len(pod.Containers) != 1 || len(pod.Volumes) != 0 || len(pod.InitContainers) != 0 {
		t.Fatalf("pod: %+v", pod)
	}
	c := pod.Containers[0]
	if c.Name != "edge" || c.Image != "registry.example.com/acme/composition-edge:1a2b3c4d" {
		t.Errorf("container %s, image %s", c.Name, c.Image)
	}
	if c.Lifecycle == nil || c.Lifecycle.PreStop == nil || !reflect.DeepEqual(c.Lifecycle.PreStop.Exec.Command, []string{"sleep", "5"}) {
		t.Errorf("preStop: %+v", c.Lifecycle)
	}
	if c.StartupProbe != nil || c.ReadinessProbe != nil || c.LivenessProbe != nil || len(c.Ports) != 0 {
		t.Errorf("probes or ports without a probe: %+v %+v %v", c.StartupProbe, c.ReadinessProbe, c.Ports)
	}
	if got := envNames(c.Env); !reflect.DeepEqual(got, []string{"TOA_CONTEXT", "TOA_ENV", "NODE_OPTIONS"}) {
		t.Errorf("env: %v", got)
	}
	if c.Env[0].Value != "acme" || c.Env[1].Value != "test" {
		t.Errorf("TOA_CONTEXT=%q TOA_ENV=%q", c.Env[0].Value, c.Env[1].Value)
	}
	for name, want := range map[string]map[corev1.ResourceName]string{
		"requests": {corev1.ResourceCPU: "100m", corev1.ResourceMemory: "100Mi"},
		"limits":   {corev1.ResourceCPU: "1", corev1.ResourceMemory: "1Gi"},
	} {
		list := c.Resources.Requests
		if name == "limits" {
			list = c.Resources.Limits
		}
		if len(list) != 2 {
			t.Errorf("%s: %v", name, list)
		}
		for r, q := range want {
			if got := list[r]; got.String() != q {
				t.Errorf("%s.%s: %s, want %s", name, r, got.String(), q)
			}
		}
	}
}

func TestProbesEveryTwoSeconds(t *testing.T) {
	app, images := edge(&toa.Resources{None: true})
	objects, err := Objects(app, images, WithDependencies(&Dependencies{Probe: &Probe{Path: "/.ready", Port: 8001, Delay: 3}}))
	if err != nil {
		t.Fatal(err)
	}
	c := objects[0].(*appsv1.Deployment).Spec.Template.Spec.Containers[0]
	get := &corev1.HTTPGetAction{Path: "/.ready", Port: intstr.FromInt32(8001)}
	startup := &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: get},
		InitialDelaySeconds: 3, PeriodSeconds: 2, TimeoutSeconds: 3, FailureThreshold: 150}
	readiness := &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: get},
		PeriodSeconds: 2, TimeoutSeconds: 3, FailureThreshold: 5}
	if !reflect.DeepEqual(c.StartupProbe, startup) {
		t.Errorf("startupProbe: %+v", c.StartupProbe)
	}
	if !reflect.DeepEqual(c.ReadinessProbe, readiness) {
		t.Errorf("readinessProbe: %+v", c.ReadinessProbe)
	}
	if c.LivenessProbe != nil {
		t.Error("a liveness probe the chart has not")
	}
	if !reflect.DeepEqual(c.Ports, []corev1.ContainerPort{{ContainerPort: 8001}}) {
		t.Errorf("ports: %v", c.Ports)
	}
}

func TestComponentServices(t *testing.T) {
	app, images := edge(nil)
	app.Resources = &toa.Resources{None: true}
	other := component("todos", "lists")
	app.Components = append(app.Components, other)
	app.Compositions = append(app.Compositions, &toa.Composition{Name: "todos-lists", Components: []*toa.Component{other}})
	images.List = append(images.List, Image{Kind: KindComposition, Name: "composition-todos-lists", Composition: "todos-lists", Reference: "r/todos-lists:00000000"})

	objects, err := Objects(app, images)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, o := range objects {
		names = append(names, o.GetObjectKind().GroupVersionKind().Kind+"/"+o.GetName())
	}
	want := []string{"Deployment/composition-edge", "Deployment/composition-todos-lists",
		"Service/todos-tasks", "Service/todos-stats", "Service/todos-lists"}
	if !reflect.DeepEqual(names, want) {
		t.Fatalf("objects: %v, want %v", names, want)
	}
	s := objects[2].(*corev1.Service)
	if s.APIVersion != "v1" || s.Spec.Type != corev1.ServiceTypeClusterIP ||
		!reflect.DeepEqual(s.Spec.Selector, map[string]string{"toa/component-todos-tasks": "1"}) {
		t.Errorf("service: %+v", s)
	}
	port := corev1.ServicePort{Name: "http-binding", Protocol: corev1.ProtocolTCP, Port: 3000, TargetPort: intstr.FromInt32(3000)}
	if !reflect.DeepEqual(s.Spec.Ports, []corev1.ServicePort{port}) {
		t.Errorf("ports: %+v", s.Spec.Ports)
	}
}

func TestHeap(t *testing.T) {
	for _, tc := range []struct {
		name    string
		own     *toa.Resources
		context *toa.Resources
		stated  bool // NODE_OPTIONS among the dependencies' variables
		want    string
	}{
		{"1Gi", memory("100Mi", "1Gi"), nil, false, "--max-old-space-size=768"},
		{"500Mi", memory("200Mi", "500Mi"), nil, false, "--max-old-space-size=375"},
		{"the context's", nil, memory("128Mi", "256Mi"), false, "--max-old-space-size=192"},
		{"its own over the context's", memory("1Gi", "2Gi"), memory("128Mi", "256Mi"), false, "--max-old-space-size=1536"},
		{"1.5Gi", memory("1Gi", "1.5Gi"), nil, false, "--max-old-space-size=1152"},
		{"500M", memory("1M", "500M"), nil, false, "--max-old-space-size=357"},
		{"stated", memory("100Mi", "1Gi"), nil, true, "--max-old-space-size=100"},
		{"no memory limit", &toa.Resources{CPU: &toa.Pair{Request: "100m", Limit: "1"}}, nil, false, ""},
		{"resources: null", &toa.Resources{None: true}, memory("1Gi", "1Gi"), false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			app, images := edge(tc.own)
			app.Resources = tc.context
			deps := &Dependencies{}
			if tc.stated {
				deps.Variables = []Scoped[Variable]{{Key: Global, Items: []Variable{{Name: "NODE_OPTIONS", Value: "--max-old-space-size=100"}}}}
			}
			objects, err := Objects(app, images, WithDependencies(deps))
			if err != nil {
				t.Fatal(err)
			}
			env := objects[0].(*appsv1.Deployment).Spec.Template.Spec.Containers[0].Env
			var got []string
			for _, e := range env {
				if e.Name == "NODE_OPTIONS" {
					got = append(got, e.Value)
				}
			}
			switch {
			case tc.want == "" && len(got) != 0:
				t.Errorf("NODE_OPTIONS %v, want none", got)
			case tc.want != "" && !reflect.DeepEqual(got, []string{tc.want}):
				t.Errorf("NODE_OPTIONS %v, want %s", got, tc.want)
			case tc.want != "" && env[len(env)-1].Name != "NODE_OPTIONS":
				t.Errorf("NODE_OPTIONS is not last: %v", envNames(env))
			}
		})
	}
}

func TestQuantity(t *testing.T) {
	for in, want := range map[string]float64{
		"512Mi": 512 * (1 << 20),
		"1Gi":   1 << 30,
		"500M":  500e6,
		"1.5Gi": 1.5 * (1 << 30),
		"1024":  1024,
		"1Ki":   1024,
		"2E":    2e18,
	} {
		got, err := quantity(in)
		if err != nil || got != want {
			t.Errorf("quantity(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for in, want := range map[string]string{
		"500m":  "'500m' is not a memory quantity",
		"1k":    "'1k' is not a memory quantity",
		"10u":   "'10u' is not a memory quantity",
		"big":   "'big' is not a quantity",
		"1 Gi":  "'1 Gi' is not a quantity",
		"-1Gi":  "'-1Gi' is not a quantity",
		"1GB":   "'1GB' is not a quantity",
		"":      "'' is not a quantity",
		"1e3":   "'1e3' is not a quantity",
		".5Gi":  "'.5Gi' is not a quantity",
		"1.5.1": "'1.5.1' is not a quantity",
	} {
		if _, err := quantity(in); err == nil || err.Error() != want {
			t.Errorf("quantity(%q): %v, want %s", in, err, want)
		}
	}
}

// A memory limit Toa cannot read is the user's mistake, named by the workload, exit code 2.
func TestQuantityErrorsNameTheUnit(t *testing.T) {
	for limit, want := range map[string]string{
		"big":  "Composition 'edge': 'big' is not a quantity",
		"500m": "Composition 'edge': '500m' is not a memory quantity",
	} {
		app, images := edge(memory("100Mi", limit))
		_, err := Objects(app, images)
		var e *fault.Input
		if !errors.As(err, &e) {
			t.Fatalf("%s: %v is not a *fault.Input", limit, err)
		}
		if e.Message != want || e.Key != "compositions[0].resources.memory" {
			t.Errorf("%s: %q at %q, want %q", limit, e.Message, e.Key, want)
		}
	}
	app, images := edge(&toa.Resources{CPU: &toa.Pair{Request: "100m", Limit: "lots"}})
	_, err := Objects(app, images)
	if !fault.IsInput(err) || !strings.Contains(err.Error(), "Composition 'edge': the cpu limit 'lots' is not a quantity") {
		t.Errorf("cpu: %v", err)
	}
}

func TestRefusal(t *testing.T) {
	app, images := edge(nil)
	_, err := Objects(app, images)
	var e *fault.Input
	if !errors.As(err, &e) {
		t.Fatalf("%v is not a *fault.Input", err)
	}
	want := "Composition 'edge' declares no resources. Declare them on it or as the context's 'resources', " +
		"or 'resources: null' to deploy it without any."
	if e.Message != want {
		t.Errorf("message:\n%s\nwant\n%s", e.Message, want)
	}
	if e.File != app.File {
		t.Errorf("file %s", e.File)
	}
}

func TestResourcesAsGiven(t *testing.T) {
	app, images := edge(&toa.Resources{CPU: &toa.Pair{Request: "250m", Limit: "2"}})
	c := deploymentOf(t, app, images, "composition-edge").Spec.Template.Spec.Containers[0]
	if len(c.Resources.Requests) != 1 || len(c.Resources.Limits) != 1 {
		t.Fatalf("resources: %+v", c.Resources)
	}
	if q := c.Resources.Requests[corev1.ResourceCPU]; q.String() != "250m" {
		t.Errorf("requests.cpu %s", q.String())
	}
	if q := c.Resources.Limits[corev1.ResourceCPU]; q.String() != "2" {
		t.Errorf("limits.cpu %s", q.String())
	}

	app, images = edge(&toa.Resources{None: true})
	app.Resources = memory("1Gi", "1Gi") // null on the composition is an answer: the context's is not taken
	c = deploymentOf(t, app, images, "composition-edge").Spec.Template.Spec.Containers[0]
	if len(c.Resources.Requests) != 0 || len(c.Resources.Limits) != 0 || len(c.Resources.Claims) != 0 {
		t.Errorf("resources: %+v", c.Resources)
	}
}

// Variables as Toa's describe() adds them: the context's two first in the global group, the
// groups of the workload's components and the global one in their order, each name once, the
// first kept; a Secret's key for a secret, optional only when it says so.
func TestVariables(t *testing.T) {
	app, images := edge(&toa.Resources{None: true})
	app.Atomicity = &toa.Atomicity{Redis: []string{"redis://a", "redis://b", "redis://c"}, Interval: 200}
	interval, retention := 500, 0
	app.Outbox = &toa.Outbox{Interval: &interval, Retention: &retention}
	deps := &Dependencies{Variables: []Scoped[Variable]{
		{Key: "todos-tasks", Items: []Variable{
			{Name: "TOA_MONGODB_TODOS_TASKS", Value: "mongodb://mongo"},
			{Name: "TOA_MONGODB_TODOS_TASKS_USERNAME", Secret: &SecretKey{Name: "toa-mongodb.default", Key: "username"}},
		}},
		{Key: "todos-lists", Items: []Variable{{Name: "NOT_HERE", Value: "x"}}},
		{Key: Global, Items: []Variable{
			{Name: "TOA_ENV", Value: "overridden"},
			{Name: "TOA_AMQP_CONTEXT", Value: "e30="},
			{Name: "TOA_AMQP_CONTEXT__PASSWORD", Secret: &SecretKey{Name: "toa-amqp-context.default", Key: "password", Optional: true}},
			{Name: "EMPTY"},
		}},
		{Key: "todos-stats", Items: []Variable{{Name: "TOA_MONGODB_TODOS_TASKS", Value: "second"}}},
	}}
	objects, err := Objects(app, images, WithDependencies(deps))
	if err != nil {
		t.Fatal(err)
	}
	env := objects[0].(*appsv1.Deployment).Spec.Template.Spec.Containers[0].Env
	want := []corev1.EnvVar{
		{Name: "TOA_MONGODB_TODOS_TASKS", Value: "mongodb://mongo"},
		{Name: "TOA_MONGODB_TODOS_TASKS_USERNAME", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: "toa-mongodb.default"}, Key: "username"}}},
		{Name: "TOA_CONTEXT", Value: "acme"},
		{Name: "TOA_ENV", Value: "test"},
		{Name: "TOA_AMQP_CONTEXT", Value: "e30="},
		{Name: "TOA_AMQP_CONTEXT__PASSWORD", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: "toa-amqp-context.default"}, Key: "password", Optional: ptr(true)}}},
		{Name: "EMPTY"},
		{Name: "TOA_ATOMICITY_REDIS", Value: "redis://a redis://b redis://c"},
		{Name: "TOA_ATOMICITY_INTERVAL", Value: "200"},
		{Name: "TOA_OUTBOX_INTERVAL", Value: "500"},
		{Name: "TOA_OUTBOX_RETENTION", Value: "0"},
	}
	if !reflect.DeepEqual(env, want) {
		t.Errorf("env:\n%v\nwant\n%v", env, want)
	}
}

func TestMounts(t *testing.T) {
	app, images := edge(&toa.Resources{None: true})
	deps := &Dependencies{Mounts: []Scoped[Mount]{
		{Key: "todos-stats", Items: []Mount{{Name: "tmp", Path: "/tmp/stats", Claim: "stats-claim"}}},
		{Key: Global, Items: []Mount{{Name: "tmp", Path: "/tmp/other", Claim: "other"}, {Name: "docs", Path: "/docs", Claim: "docs"}}},
		{Key: "elsewhere", Items: []Mount{{Name: "no", Path: "/no", Claim: "no"}}},
	}}
	objects, err := Objects(app, images, WithDependencies(deps))
	if err != nil {
		t.Fatal(err)
	}
	pod := objects[0].(*appsv1.Deployment).Spec.Template.Spec
	mounts := []corev1.VolumeMount{{Name: "tmp", MountPath: "/tmp/stats"}, {Name: "docs", MountPath: "/docs"}}
	volumes := []corev1.Volume{
		{Name: "tmp", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "stats-claim"}}},
		{Name: "docs", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "docs"}}},
	}
	if !reflect.DeepEqual(pod.Containers[0].VolumeMounts, mounts) || !reflect.DeepEqual(pod.Volumes, volumes) {
		t.Errorf("mounts %+v, volumes %+v", pod.Containers[0].VolumeMounts, pod.Volumes)
	}
}

// The testdata applications as the lead wrote them: derived and declared compositions.
func TestTestdataApplications(t *testing.T) {
	derived := load(t, "derived", "default")
	objects := objectsOf(t, derived)
	want := []string{"composition-default-echo", "composition-orders-orders", "composition-orders-stats",
		"default-echo", "orders-orders", "orders-stats"}
	if got := names(objects); !reflect.DeepEqual(got, want) {
		t.Errorf("derived: %v, want %v", got, want)
	}
	for _, o := range objects[:3] {
		c := o.(*appsv1.Deployment).Spec.Template.Spec.Containers[0]
		if e := c.Env[len(c.Env)-1]; e.Name != "NODE_OPTIONS" || e.Value != "--max-old-space-size=192" {
			t.Errorf("%s: %v", o.GetName(), e)
		}
	}

	shop := load(t, "declared", "production")
	objects = objectsOf(t, shop)
	want = []string{"composition-front", "composition-back", "composition-audit-log",
		"shop-orders", "shop-carts", "shop-prices", "audit-log"}
	if got := names(objects); !reflect.DeepEqual(got, want) {
		t.Errorf("declared: %v, want %v", got, want)
	}
	front := objects[0].(*appsv1.Deployment).Spec.Template.Spec
	if got := envNames(front.Containers[0].Env); !reflect.DeepEqual(got, []string{"TOA_CONTEXT", "TOA_ENV",
		"TOA_ATOMICITY_REDIS", "TOA_OUTBOX_INTERVAL", "TOA_OUTBOX_BATCH", "NODE_OPTIONS"}) {
		t.Errorf("front env: %v", got)
	}
	if v := front.Containers[0].Env[1].Value; v != "production" {
		t.Errorf("TOA_ENV %s", v)
	}
	if v := front.Containers[0].Env[5].Value; v != "--max-old-space-size=768" {
		t.Errorf("front: %s", v)
	}
	back := objects[1].(*appsv1.Deployment).Spec.Template.Spec.Containers[0]
	if len(back.Resources.Limits) != 0 || envNames(back.Env)[len(back.Env)-1] == "NODE_OPTIONS" {
		t.Errorf("back, resources: null: %+v %v", back.Resources, envNames(back.Env))
	}
	audit := objects[2].(*appsv1.Deployment).Spec.Template.Spec.Containers[0]
	if e := audit.Env[len(audit.Env)-1]; e.Value != "--max-old-space-size=768" { // the context's 1Gi in production
		t.Errorf("audit-log: %v", e)
	}
	if q := audit.Resources.Limits[corev1.ResourceMemory]; q.String() != "1Gi" {
		t.Errorf("audit-log memory limit %s", q.String())
	}
}

// --- helpers ---

// edge is an application of one composition, edge, of two components, with the resources given.
func edge(resources *toa.Resources) (*toa.Application, Images) {
	tasks, stats := component("todos", "tasks"), component("todos", "stats")
	c := &toa.Composition{Name: "edge", Declared: true, Components: []*toa.Component{tasks, stats}, Resources: resources}
	app := &toa.Application{Name: "acme", Environment: "test", File: "/src/acme/context.toa.yaml",
		Components: []*toa.Component{tasks, stats}, Compositions: []*toa.Composition{c}}
	return app, Images{List: []Image{{Kind: KindComposition, Name: "composition-edge", Composition: "edge", Reference: "registry.example.com/acme/composition-edge:1a2b3c4d"}}}
}

func component(namespace, name string) *toa.Component {
	return &toa.Component{Name: name, Namespace: namespace, Locator: toa.NewLocator(name, namespace)}
}

func memory(request, limit string) *toa.Resources {
	return &toa.Resources{Memory: &toa.Pair{Request: request, Limit: limit}}
}

func deploymentOf(t *testing.T, app *toa.Application, images Images, name string) *appsv1.Deployment {
	t.Helper()
	objects, err := Objects(app, images)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objects {
		if d, ok := o.(*appsv1.Deployment); ok && d.Name == name {
			return d
		}
	}
	t.Fatalf("no Deployment %s among %v", name, names(objects))
	return nil
}

func load(t *testing.T, name, env string) *toa.Application {
	t.Helper()
	app, err := toa.Load("../testdata/apps/"+name, env)
	if err != nil {
		t.Fatal(err)
	}
	return app
}

// objectsOf plans the application's images with made-up tags: the real ones depend on the bases
// and the machine's node and npm.
func objectsOf(t *testing.T, app *toa.Application) []Object {
	t.Helper()
	plan, err := image.NewPlan(app, image.PlanOptions{})
	if err != nil {
		t.Fatal(err)
	}
	objects, err := Objects(app, planned(plan, false, fakeTag))
	if err != nil {
		t.Fatal(err)
	}
	return objects
}

func names(objects []Object) []string {
	var out []string
	for _, o := range objects {
		out = append(out, o.GetName())
	}
	return out
}

func envNames(env []corev1.EnvVar) []string {
	var out []string
	for _, e := range env {
		out = append(out, e.Name)
	}
	return out
}
