package manifest

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"

	"github.com/toa-deploy/toa-deploy/internal/app/toa"
	"github.com/toa-deploy/toa-deploy/internal/fault"
)

// Extension services as the 289 chart renders them (reference §3.3, §3.4, §4.2, §5.4, §5.5).

func gateway() *Service {
	return &Service{Reference: "@toa.io/extensions.exposition", Group: "exposition", Name: "exposition-gateway",
		Version: "1.0.0", Published: "ghcr.io/toa-io/extension-exposition-gateway", Port: 8000,
		Ingress:    &Ingress{Path: "/", Hosts: []string{"api.acme.example"}},
		Probe:      &Probe{Path: "/.ready", Port: 8004, Delay: 3},
		Components: []string{"identity-tokens"},
		Variables:  []Variable{{Name: "TOA_EXPOSITION", Value: "{}"}, {Name: "TOA_CONTEXT", Value: "not this one"}}}
}

func explorer() *Service {
	return &Service{Reference: "@toa.io/extensions.introspection", Group: "introspection", Name: "introspection-explorer",
		Port: 8002, Ingress: &Ingress{Path: "/.introspection"}}
}

func withServices(app *toa.Application, images *Images, services ...*Service) *Dependencies {
	deps := &Dependencies{Services: services, Probe: &Probe{Path: "/.ready", Port: 8001},
		Variables: []Scoped[Variable]{
			{Key: "identity-tokens", Items: []Variable{{Name: "TOA_CONFIGURATION_IDENTITY_TOKENS", Value: "e30="}}},
			{Key: "todos-tasks", Items: []Variable{{Name: "TOA_MONGODB_TODOS_TASKS", Value: "mongodb://mongo"}}},
		}}
	for _, s := range ServiceImages(app, deps, images.Mono) {
		images.List = append(images.List, Image{Kind: KindService, Name: s.ObjectName(), Reference: "registry.example.com/acme/" + s.ObjectName() + ":5e41ce00"})
	}
	return deps
}

func objectsByName(t *testing.T, app *toa.Application, images Images, deps *Dependencies) map[string]Object {
	t.Helper()
	objects, err := Objects(app, images, WithDependencies(deps))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]Object{}
	for _, o := range objects {
		out[o.GetObjectKind().GroupVersionKind().Kind+"/"+o.GetName()] = o
	}
	return out
}

func TestServiceOfItsOwn(t *testing.T) {
	app, images := edge(&toa.Resources{None: true})
	app.Resources = memory("100Mi", "200Mi")
	yes := true
	app.Ingress = &toa.Ingress{Hosts: []string{"acme.example"}, Class: "nginx", Default: &yes,
		Annotations: map[string]string{"a": "b"}}
	app.Registry.Base = "registry.example.com"
	deps := withServices(app, &images, gateway())
	objects := objectsByName(t, app, images, deps)

	d := objects["Deployment/extension-exposition-gateway"].(*appsv1.Deployment)
	selector := map[string]string{"toa/service": "extension-exposition-gateway"}
	if !reflect.DeepEqual(d.Spec.Selector.MatchLabels, selector) ||
		!reflect.DeepEqual(d.Spec.Template.Labels, map[string]string{"toa/service": "extension-exposition-gateway", "toa/service-exposition-gateway": "1"}) {
		t.Errorf("labels: %v %v", d.Spec.Selector.MatchLabels, d.Spec.Template.Labels)
	}
	pod := d.Spec.Template.Spec
	c := pod.Containers[0]
	if c.Name != "extension-exposition-gateway" || c.Image != "registry.example.com/acme/extension-exposition-gateway:5e41ce00" {
		t.Errorf("container %s image %s", c.Name, c.Image)
	}
	if len(c.Ports) != 0 || len(pod.ImagePullSecrets) != 0 || len(pod.Volumes) != 0 {
		t.Errorf("a service's pod has no ports, pull secrets or volumes in the chart: %+v", pod)
	}
	if c.ReadinessProbe.HTTPGet.Port.IntVal != 8004 || c.StartupProbe.InitialDelaySeconds != 3 {
		t.Errorf("probe: %+v", c.ReadinessProbe)
	}
	// its own first, then the global ones and its components', each name once
	want := []string{"TOA_EXPOSITION", "TOA_CONTEXT", "TOA_CONFIGURATION_IDENTITY_TOKENS", "TOA_ENV", "NODE_OPTIONS"}
	if got := envNames(c.Env); !reflect.DeepEqual(got, want) {
		t.Errorf("env %v, want %v", got, want)
	}
	if c.Env[1].Value != "not this one" || c.Env[4].Value != "--max-old-space-size=150" {
		t.Errorf("env %v", c.Env)
	}

	s := objects["Service/extension-exposition-gateway"].(*corev1.Service)
	if !reflect.DeepEqual(s.Spec.Selector, map[string]string{"toa/service-exposition-gateway": "1"}) ||
		len(s.Spec.Ports) != 1 || s.Spec.Ports[0].Name != "port-8000" || s.Spec.Ports[0].TargetPort.IntVal != 8000 {
		t.Errorf("service %+v", s.Spec)
	}
	in := objects["Ingress/extension-exposition-gateway"].(*networkingv1.Ingress)
	// the service's hosts, the context's class, annotations and default rule
	if *in.Spec.IngressClassName != "nginx" || in.Annotations["a"] != "b" || len(in.Spec.Rules) != 2 ||
		in.Spec.Rules[0].Host != "api.acme.example" || in.Spec.Rules[1].Host != "" {
		t.Errorf("ingress %+v", in)
	}
	path := in.Spec.Rules[1].HTTP.Paths[0]
	if path.Path != "/" || *path.PathType != networkingv1.PathTypePrefix || path.Backend.Service.Name != "extension-exposition-gateway" ||
		path.Backend.Service.Port.Number != 8000 {
		t.Errorf("path %+v", path)
	}
}

func TestServiceACompositionRuns(t *testing.T) {
	app, images := edge(&toa.Resources{None: true})
	app.Compositions[0].Services = []string{"@toa.io/extensions.exposition"}
	app.Ingress = &toa.Ingress{Hosts: []string{"acme.example"}}
	deps := withServices(app, &images, gateway())
	objects := objectsByName(t, app, images, deps)
	if _, ok := objects["Deployment/extension-exposition-gateway"]; ok {
		t.Error("a Deployment of a service a composition runs")
	}
	if _, ok := objects["Service/extension-exposition-gateway"]; !ok {
		t.Error("no Service of the hosted gateway")
	}
	if _, ok := objects["Ingress/extension-exposition-gateway"]; !ok {
		t.Error("no Ingress of the hosted gateway")
	}
	if _, ok := images.find(KindService, "extension-exposition-gateway"); ok {
		t.Error("an image for a service a composition runs")
	}
	d := objects["Deployment/composition-edge"].(*appsv1.Deployment)
	if d.Spec.Template.Labels["toa/service-exposition-gateway"] != "1" {
		t.Errorf("labels %v", d.Spec.Template.Labels)
	}
	c := d.Spec.Template.Spec.Containers[0]
	// TOA_SERVICES first; the groups in the order the dependencies added them (the component
	// groups before the global one here), the gateway's own after them
	want := []string{"TOA_SERVICES", "TOA_CONFIGURATION_IDENTITY_TOKENS", "TOA_MONGODB_TODOS_TASKS", "TOA_CONTEXT", "TOA_ENV", "TOA_EXPOSITION"}
	if got := envNames(c.Env); !reflect.DeepEqual(got, want) {
		t.Errorf("env %v, want %v", got, want)
	}
	if c.Env[0].Value != "@toa.io/extensions.exposition" || c.Env[3].Value != "acme" {
		t.Errorf("env %v", c.Env)
	}
	if !reflect.DeepEqual(c.Ports, []corev1.ContainerPort{{ContainerPort: 8000}, {ContainerPort: 8004}}) ||
		c.ReadinessProbe.HTTPGet.Port.IntVal != 8004 {
		t.Errorf("ports %v, probe %+v", c.Ports, c.ReadinessProbe)
	}
}

func TestPublishedServiceImage(t *testing.T) {
	app, images := edge(&toa.Resources{None: true})
	app.Registry.Services = "published"
	app.Resources = &toa.Resources{None: true}
	app.Runtime.Version = "1.0.0-alpha.289"
	app.Ingress = &toa.Ingress{Hosts: []string{"acme.example"}}
	deps := withServices(app, &images, gateway())
	if n := len(ServiceImages(app, deps, false)); n != 0 {
		t.Errorf("%d images to build of a published service", n)
	}
	d := objectsByName(t, app, images, deps)["Deployment/extension-exposition-gateway"].(*appsv1.Deployment)
	if img := d.Spec.Template.Spec.Containers[0].Image; img != "ghcr.io/toa-io/extension-exposition-gateway:1.0.0-alpha.289" {
		t.Errorf("image %s", img)
	}
}

func TestMono(t *testing.T) {
	app, _ := edge(nil)
	app.Mono = toa.Mono{Replicas: 3, Resources: memory("512Mi", "1Gi")}
	app.Ingress = &toa.Ingress{Hosts: []string{"acme.example"}, Class: "nginx"}
	images := Images{Mono: true, List: []Image{{Kind: KindMono, Name: "mono", Reference: "registry.example.com/acme/mono:0a0b0c0d"}}}
	g := gateway()
	g.Annotations = map[string]string{"svc": "1"}
	deps := withServices(app, &images, g, explorer())
	deps.Mounts = []Scoped[Mount]{{Key: "todos-lists", Items: []Mount{{Name: "tmp", Path: "/tmp", Claim: "tmp"}}}}
	objects, err := Objects(app, images, WithDependencies(deps))
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, o := range objects {
		kinds = append(kinds, o.GetObjectKind().GroupVersionKind().Kind+"/"+o.GetName())
	}
	if want := []string{"Service/todos-tasks", "Service/todos-stats", "Deployment/mono", "Service/mono", "Ingress/mono"}; !reflect.DeepEqual(kinds, want) {
		t.Fatalf("objects %v, want %v", kinds, want)
	}
	d := objects[2].(*appsv1.Deployment)
	if *d.Spec.Replicas != 3 || d.Spec.Selector.MatchLabels["toa/composition"] != "mono" ||
		d.Spec.Template.Labels["toa/component-todos-stats"] != "1" {
		t.Errorf("mono %+v", d.Spec)
	}
	c := d.Spec.Template.Spec.Containers[0]
	if c.Name != "mono" || c.Image != "registry.example.com/acme/mono:0a0b0c0d" {
		t.Errorf("container %s %s", c.Name, c.Image)
	}
	// every key's variables, whatever component they are for, and the services'
	for _, name := range []string{"TOA_CONFIGURATION_IDENTITY_TOKENS", "TOA_MONGODB_TODOS_TASKS", "TOA_EXPOSITION", "NODE_OPTIONS"} {
		if !strings.Contains(strings.Join(envNames(c.Env), " "), name) {
			t.Errorf("no %s in %v", name, envNames(c.Env))
		}
	}
	for _, e := range c.Env {
		if e.Name == "TOA_SERVICES" {
			t.Error("TOA_SERVICES in mono")
		}
	}
	if len(c.VolumeMounts) != 1 {
		t.Errorf("mounts %v", c.VolumeMounts)
	}
	if !reflect.DeepEqual(c.Ports, []corev1.ContainerPort{{ContainerPort: 8002}, {ContainerPort: 8000}, {ContainerPort: 8004}}) {
		t.Errorf("ports %v", c.Ports)
	}
	s := objects[3].(*corev1.Service)
	if s.Annotations["svc"] != "1" || len(s.Spec.Ports) != 2 || s.Spec.Ports[0].Name != "port-8002" ||
		!reflect.DeepEqual(s.Spec.Selector, map[string]string{"toa/composition": "mono"}) {
		t.Errorf("service %+v", s)
	}
	in := objects[4].(*networkingv1.Ingress)
	if len(in.Spec.Rules) != 2 || in.Spec.Rules[0].Host != "acme.example" || in.Spec.Rules[1].Host != "api.acme.example" {
		t.Fatalf("rules %+v", in.Spec.Rules)
	}
	paths := in.Spec.Rules[1].HTTP.Paths
	if len(paths) != 2 || paths[0].Path != "/.introspection" || paths[0].Backend.Service.Port.Number != 8002 ||
		paths[1].Path != "/" || paths[1].Backend.Service.Name != "mono" {
		t.Errorf("paths, the longest first: %+v", paths)
	}
}

func TestEventsConsumed(t *testing.T) {
	app, images := edge(&toa.Resources{None: true})
	tasks, stats := app.Components[0], app.Components[1]
	tasks.Events = []string{"created", "closed", "deleted"}
	stats.Receivers = []toa.Receiver{{Event: "todos.tasks.created"}, {Event: "todos.tasks.closed", Source: "legacy"}}
	app.Events = []string{"todos.tasks.deleted"}
	deps := &Dependencies{Deployed: []*toa.Component{tasks, stats}}
	c := objectsByName(t, app, images, deps)["Deployment/composition-edge"].(*appsv1.Deployment).Spec.Template.Spec.Containers[0]
	var got []string
	for _, e := range c.Env {
		if strings.HasPrefix(e.Name, "TOA_EVENTS_") {
			got = append(got, e.Name+"="+e.Value)
		}
	}
	if want := []string{"TOA_EVENTS_TODOS_TASKS=created deleted"}; !reflect.DeepEqual(got, want) {
		t.Errorf("%v, want %v", got, want)
	}
}

// Toa's refusals, word for word.
func TestServiceRefusals(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(*toa.Application) []*Service
		want  string
	}{
		{"contributes no service", func(app *toa.Application) []*Service {
			app.Compositions[0].Services = []string{"@toa.io/extensions.configuration"}
			return []*Service{gateway()}
		}, "Composition 'edge' lists '@toa.io/extensions.configuration', which contributes no service."},
		{"a port claimed twice in a composition", func(app *toa.Application) []*Service {
			app.Compositions[0].Services = []string{"@toa.io/extensions.exposition", "@toa.io/extensions.introspection"}
			e := explorer()
			e.Port = 8000
			return []*Service{gateway(), e}
		}, "Port 8000 is claimed by both 'exposition-gateway' and 'introspection-explorer' in 'edge'"},
		{"the readiness probe's port", func(app *toa.Application) []*Service {
			g := gateway()
			g.Probe.Port = 8001
			return []*Service{g}
		}, "Port 8001 is claimed by both the readiness probe and the readiness probe of 'exposition-gateway'"},
		{"an ingress without hosts", func(app *toa.Application) []*Service {
			app.Ingress = nil
			return []*Service{explorer()}
		}, "Service 'introspection-explorer' declares an ingress, but no hosts are defined. Declare them in the context's 'ingress' section."},
		{"an ingress without a port", func(app *toa.Application) []*Service {
			e := explorer()
			e.Port = 0
			return []*Service{e}
		}, "Service 'introspection-explorer' declares an ingress, but no port."},
		{"a service without resources", func(app *toa.Application) []*Service {
			app.Resources = nil
			return []*Service{explorer()}
		}, "Service 'introspection-explorer' declares no resources. Declare them on it or as the context's 'resources', or 'resources: null' to deploy it without any."},
	} {
		t.Run(tc.name, func(t *testing.T) {
			app, images := edge(&toa.Resources{None: true})
			app.Resources = &toa.Resources{None: true}
			app.Ingress = &toa.Ingress{Hosts: []string{"acme.example"}}
			deps := withServices(app, &images, tc.setup(app)...)
			_, err := Objects(app, images, WithDependencies(deps))
			var e *fault.Input
			if !errors.As(err, &e) {
				t.Fatalf("%v is not a *fault.Input", err)
			}
			if e.Message != tc.want {
				t.Errorf("%q\nwant %q", e.Message, tc.want)
			}
		})
	}
	app, _ := edge(nil)
	images := Images{Mono: true, List: []Image{{Kind: KindMono, Name: "mono", Reference: "r/mono:0a0b0c0d"}}}
	_, err := Objects(app, images)
	if want := "The mono deployment declares no resources."; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("%v, want %s", err, want)
	}
}
