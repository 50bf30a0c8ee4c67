package manifest

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/toa-deploy/toa-deploy/internal/app/toa"
	"github.com/toa-deploy/toa-deploy/internal/fault"
)

// Object is a Kubernetes object of the application, typed, with its apiVersion and kind set.
type Object interface {
	metav1.Object
	runtime.Object
}

// Option tunes Objects.
type Option func(*options)

type options struct {
	deps *Dependencies
}

// WithDependencies gives the variables, mounts and probe the application's extensions and
// connectors declare.
func WithDependencies(d *Dependencies) Option {
	return func(o *options) { o.deps = d }
}

// Objects returns the application's Kubernetes objects, as Toa 289's chart rendered them:
// Describe, then Values.Objects. A mistake in the application is a *fault.Input.
func Objects(app *toa.Application, images Images, opts ...Option) ([]Object, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	v, err := Describe(app, images, o.deps)
	if err != nil {
		return nil, err
	}
	return v.Objects(app.File)
}

// The chart's constants (reference §5.4, seeds/000).
const (
	defaultReplicas         = 2
	progressDeadlineSeconds = 900 // a backstop for stuck rollouts, above the apply's wait
	gracePeriodSeconds      = 45
	preStopSleep            = "5"
	bindingPort             = 3000 // a component's Service: the HTTP binding
	bindingPortName         = "http-binding"
	spreadTopologyKey       = "kubernetes.io/hostname"
	labelPrefix             = "toa/"
)

// Objects returns the objects of the values, in the chart's order: the compositions'
// Deployments, the components' Services, each extension service's Deployment (unless a
// workload runs it), Service (where it has a port) and Ingress (where it asks for one), and
// mono's Deployment, Service and Ingress. file is the context file that messages about
// resources name.
func (v *Values) Objects(file string) ([]Object, error) {
	var out []Object
	for _, w := range v.Compositions {
		d, err := v.composition(w)
		if err != nil {
			return nil, &fault.Input{File: file, Key: w.resourcesKey, Message: w.Subject + ": " + err.Error(), Err: err}
		}
		out = append(out, d)
	}
	for _, label := range v.Components {
		out = append(out, componentService(label))
	}
	for _, s := range v.Services {
		objects, err := serviceObjects(s)
		if err != nil {
			return nil, &fault.Input{File: file, Key: s.resourcesKey, Message: fmt.Sprintf("Service '%s': %v", s.Name, err)}
		}
		out = append(out, objects...)
	}
	if w := v.Mono; w != nil {
		d, err := v.composition(w)
		if err != nil {
			return nil, &fault.Input{File: file, Key: w.resourcesKey, Message: w.Subject + ": " + err.Error(), Err: err}
		}
		out = append(out, d)
		if len(w.Backends) > 0 {
			var ports []corev1.ServicePort
			for _, b := range w.Backends {
				ports = append(ports, servicePort(b.Port))
			}
			out = append(out, kubeService(w.Deployment, w.Annotations, map[string]string{labelPrefix + "composition": w.Name}, ports))
			if w.Ingress != nil {
				out = append(out, ingress(w.Deployment, w.Ingress, w.Backends))
			}
		}
	}
	return out, nil
}

// composition is templates/compositions.yaml, and mono.yaml's Deployment.
func (v *Values) composition(w *Workload) (*appsv1.Deployment, error) {
	selector := map[string]string{labelPrefix + "composition": w.Name}
	labels := map[string]string{labelPrefix + "composition": w.Name}
	for _, c := range w.Components {
		labels[labelPrefix+"component-"+c] = "1"
	}
	for _, s := range w.Hosted {
		labels[labelPrefix+"service-"+s] = "1"
	}
	container, err := container(w.Name, w)
	if err != nil {
		return nil, err
	}
	var env []corev1.EnvVar
	if len(w.Services) > 0 {
		env = append(env, corev1.EnvVar{Name: "TOA_SERVICES", Value: strings.Join(w.Services, " ")})
	}
	container.Env = append(env, container.Env...)
	for _, b := range w.Backends {
		container.Ports = appendPort(container.Ports, b.Port)
	}
	if w.Probe != nil {
		container.Ports = appendPort(container.Ports, w.Probe.Port)
	}
	for _, m := range w.Mounts {
		container.VolumeMounts = append(container.VolumeMounts, corev1.VolumeMount{Name: m.Name, MountPath: m.Path})
	}
	pod := corev1.PodSpec{
		Containers:                    []corev1.Container{container},
		TerminationGracePeriodSeconds: ptr(int64(gracePeriodSeconds)),
		TopologySpreadConstraints:     spread(selector),
	}
	if v.Credentials != "" {
		pod.ImagePullSecrets = []corev1.LocalObjectReference{{Name: v.Credentials}}
	}
	for _, m := range w.Mounts {
		pod.Volumes = append(pod.Volumes, corev1.Volume{Name: m.Name, VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: m.Claim}}})
	}
	return deployment(w.Deployment, w.Replicas, selector, labels, pod), nil
}

// appendPort lists a container port once: a service whose probe answers on its own port binds
// it once.
func appendPort(ports []corev1.ContainerPort, port int32) []corev1.ContainerPort {
	for _, p := range ports {
		if p.ContainerPort == port {
			return ports
		}
	}
	return append(ports, corev1.ContainerPort{ContainerPort: port})
}

// serviceObjects is templates/services.yaml: the Deployment of a service no workload runs, its
// Service where it has a port, its Ingress where it asks for one.
func serviceObjects(s *Service) ([]Object, error) {
	var out []Object
	name := s.ObjectName()
	if len(s.Workload) == 0 {
		selector := map[string]string{labelPrefix + "service": name}
		labels := map[string]string{labelPrefix + "service": name, labelPrefix + "service-" + s.Name: "1"}
		c, err := container(name, &Workload{Image: s.Image, Resources: s.Resources, Variables: s.Variables, Probe: s.Probe})
		if err != nil {
			return nil, err
		}
		pod := corev1.PodSpec{
			Containers:                    []corev1.Container{c},
			TerminationGracePeriodSeconds: ptr(int64(gracePeriodSeconds)),
			TopologySpreadConstraints:     spread(selector),
		}
		out = append(out, deployment(name, 0, selector, labels, pod))
	}
	if s.Port != 0 {
		out = append(out, kubeService(name, s.Annotations, map[string]string{labelPrefix + "service-" + s.Name: "1"},
			[]corev1.ServicePort{servicePort(s.Port)}))
	}
	if s.Ingress != nil {
		path := s.Ingress.Path
		if path == "" {
			path = "/"
		}
		out = append(out, ingress(name, s.Ingress, []Backend{{Port: s.Port, Path: path}}))
	}
	return out, nil
}

func servicePort(port int32) corev1.ServicePort {
	return corev1.ServicePort{Name: fmt.Sprintf("port-%d", port), Protocol: corev1.ProtocolTCP, Port: port, TargetPort: intstr.FromInt32(port)}
}

func kubeService(name string, annotations, selector map[string]string, ports []corev1.ServicePort) *corev1.Service {
	return &corev1.Service{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: maps.Clone(annotations)},
		Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, Selector: selector, Ports: ports},
	}
}

// ingress is the chart's Ingress of a service, or mono's: a rule per host, and one with no host
// where the ingress is the default, each with a path per backend (the longest first) to the
// Service of the same name.
func ingress(name string, in *Ingress, backends []Backend) *networkingv1.Ingress {
	var paths []networkingv1.HTTPIngressPath
	prefix := networkingv1.PathTypePrefix
	for _, b := range backends {
		paths = append(paths, networkingv1.HTTPIngressPath{Path: b.Path, PathType: &prefix,
			Backend: networkingv1.IngressBackend{Service: &networkingv1.IngressServiceBackend{
				Name: name, Port: networkingv1.ServiceBackendPort{Number: b.Port}}}})
	}
	rule := func(host string) networkingv1.IngressRule {
		return networkingv1.IngressRule{Host: host, IngressRuleValue: networkingv1.IngressRuleValue{
			HTTP: &networkingv1.HTTPIngressRuleValue{Paths: slices.Clone(paths)}}}
	}
	out := &networkingv1.Ingress{
		TypeMeta:   metav1.TypeMeta{APIVersion: "networking.k8s.io/v1", Kind: "Ingress"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: maps.Clone(in.Annotations)},
	}
	if in.Class != "" {
		out.Spec.IngressClassName = ptr(in.Class)
	}
	for _, h := range in.Hosts {
		out.Spec.Rules = append(out.Spec.Rules, rule(h))
	}
	if in.Default != nil && *in.Default {
		out.Spec.Rules = append(out.Spec.Rules, rule(""))
	}
	return out
}

// deployment is what every workload's Deployment shares: replicas, the rollout strategy and its
// deadline.
func deployment(name string, replicas int32, selector, labels map[string]string, pod corev1.PodSpec) *appsv1.Deployment {
	if replicas == 0 {
		replicas = defaultReplicas
	}
	surge := intstr.FromString("100%")
	unavailable := intstr.FromInt32(0)
	return &appsv1.Deployment{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.DeploymentSpec{
			Replicas:                &replicas,
			ProgressDeadlineSeconds: ptr(int32(progressDeadlineSeconds)),
			// a replacement must be ready before a running replica goes, and every replacement
			// starts at once: a rollout takes one start-up, not one per replica
			Strategy: appsv1.DeploymentStrategy{
				Type: appsv1.RollingUpdateDeploymentStrategyType,
				RollingUpdate: &appsv1.RollingUpdateDeployment{
					MaxUnavailable: &unavailable,
					MaxSurge:       &surge,
				},
			},
			Selector: &metav1.LabelSelector{MatchLabels: selector},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       pod,
			},
		},
	}
}

// container is what every workload's container shares: image, resources, variables, probes and
// the pause before it is stopped.
func container(name string, w *Workload) (corev1.Container, error) {
	c := corev1.Container{
		Name:  name,
		Image: w.Image,
		Lifecycle: &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{
			Exec: &corev1.ExecAction{Command: []string{"sleep", preStopSleep}}}},
	}
	r, err := requirements(w.Resources)
	if err != nil {
		return c, err
	}
	c.Resources = r
	for _, v := range w.Variables {
		c.Env = append(c.Env, envVar(v))
	}
	if p := w.Probe; p != nil {
		get := &corev1.HTTPGetAction{Path: p.Path, Port: intstr.FromInt32(p.Port)}
		c.StartupProbe = &corev1.Probe{
			ProbeHandler:        corev1.ProbeHandler{HTTPGet: get},
			InitialDelaySeconds: p.Delay,
			PeriodSeconds:       2,
			TimeoutSeconds:      3,
			FailureThreshold:    150,
		}
		c.ReadinessProbe = &corev1.Probe{
			ProbeHandler:     corev1.ProbeHandler{HTTPGet: get.DeepCopy()},
			PeriodSeconds:    2, // a replica is ready when it says so, not at the next tick of a slow clock
			TimeoutSeconds:   3,
			FailureThreshold: 5,
		}
	}
	return c, nil
}

// requirements are the chart's resources block: requests and limits of cpu and memory, each
// [request, limit] pair where it is given.
func requirements(r *toa.Resources) (corev1.ResourceRequirements, error) {
	var out corev1.ResourceRequirements
	if r == nil || r.None || (r.CPU == nil && r.Memory == nil) {
		return out, nil
	}
	out.Requests, out.Limits = corev1.ResourceList{}, corev1.ResourceList{}
	for _, p := range []struct {
		name corev1.ResourceName
		pair *toa.Pair
	}{{corev1.ResourceCPU, r.CPU}, {corev1.ResourceMemory, r.Memory}} {
		if p.pair == nil {
			continue
		}
		for _, q := range []struct {
			what  string
			value string
			into  corev1.ResourceList
		}{{"request", p.pair.Request, out.Requests}, {"limit", p.pair.Limit, out.Limits}} {
			parsed, err := resource.ParseQuantity(q.value)
			if err != nil {
				return out, fmt.Errorf("the %s %s '%s' is not a quantity", p.name, q.what, q.value)
			}
			q.into[p.name] = parsed
		}
	}
	return out, nil
}

// envVar is the chart's env.var: a value, a Secret's key, or a bare name for an empty value.
func envVar(v Variable) corev1.EnvVar {
	e := corev1.EnvVar{Name: v.Name, Value: v.Value}
	if s := v.Secret; s != nil {
		ref := &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: s.Name}, Key: s.Key}
		if s.Optional {
			ref.Optional = ptr(true)
		}
		e.ValueFrom = &corev1.EnvVarSource{SecretKeyRef: ref}
	}
	return e
}

// spread keeps a workload's replicas on different nodes where it can.
func spread(selector map[string]string) []corev1.TopologySpreadConstraint {
	return []corev1.TopologySpreadConstraint{{
		MaxSkew:           1,
		TopologyKey:       spreadTopologyKey,
		WhenUnsatisfiable: corev1.ScheduleAnyway,
		LabelSelector:     &metav1.LabelSelector{MatchLabels: maps.Clone(selector)},
	}}
}

// componentService is templates/components.yaml: a component's binding, reached by its label.
func componentService(label string) *corev1.Service {
	return &corev1.Service{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: metav1.ObjectMeta{Name: label},
		Spec: corev1.ServiceSpec{
			Type:     corev1.ServiceTypeClusterIP,
			Selector: map[string]string{labelPrefix + "component-" + label: "1"},
			Ports: []corev1.ServicePort{{
				Name:       bindingPortName,
				Protocol:   corev1.ProtocolTCP,
				Port:       bindingPort,
				TargetPort: intstr.FromInt32(bindingPort),
			}},
		},
	}
}

func ptr[T any](v T) *T { return &v }
