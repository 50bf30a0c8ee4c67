package manifest

import (
	"slices"

	"github.com/toa-deploy/toa-deploy/internal/app/extension"
	"github.com/toa-deploy/toa-deploy/internal/app/toa"
)

// Service is an extension's service, as the chart's values describe it (reference §5.2): a
// Deployment of its own, or, claimed by the compositions that list it (or by mono), a process in
// their pods; a Service where it has a port, an Ingress where it asks for one.
type Service struct {
	Reference string // the package that declares it
	Dir       string // the package's installed folder: what its image is built of
	Group     string
	Name      string // "<group>-<name>": its objects are named ObjectName()
	Version   string
	// Published is the repository its extension publishes the image to, without a tag; "" when
	// it publishes none.
	Published   string
	Image       string // the container's image, settled by Describe
	Port        int32  // 0 for none
	Ingress     *Ingress
	Variables   []Variable
	Components  []string // the labels of the components it runs
	Probe       *Probe
	NoProbe     bool           // `probe: false`: not probed at all
	Resources   *toa.Resources // nil takes the context's; None deploys without
	Annotations map[string]string
	// Workload are the workloads that run it: the compositions that list it, or mono; empty
	// when it is deployed on its own.
	Workload []string

	resourcesKey string
}

// ObjectName is the name of the service's Deployment, Service and Ingress, and of the image
// toa-push builds of it: "extension-<group>-<name>", as Toa's chart names them.
func (s *Service) ObjectName() string { return "extension-" + s.Name }

// Ingress is how a service, or mono, is reached from outside: the context's `ingress` merged
// with what the service asks.
type Ingress struct {
	Hosts       []string
	Class       string
	Annotations map[string]string
	Default     *bool  // a rule with no host as well; nil when not said
	Path        string // "" is "/"
}

// Merge is Toa's merge() of the dependencies' declarations (reference §4.2): services, variables
// and mounts in order, each key's items appended; the probe of the last dependency that states
// one (`false` states there is none); the events they consume; and the components of every
// instance, which the TOA_EVENTS_* variables are for.
func Merge(res *extension.Result) *Dependencies {
	d := &Dependencies{}
	if res == nil {
		return d
	}
	for _, dep := range res.Dependencies {
		for _, c := range dep.Instances {
			if !slices.Contains(d.Deployed, c) {
				d.Deployed = append(d.Deployed, c)
			}
		}
		decl := dep.Declaration
		if decl == nil {
			continue
		}
		for _, s := range decl.Services {
			svc := service(dep.Reference, s)
			svc.Dir = dep.Dir
			d.Services = append(d.Services, svc)
		}
		for _, g := range decl.Variables {
			items := make([]Variable, 0, len(g.Items))
			for _, v := range g.Items {
				items = append(items, variable(v))
			}
			d.Variables = appendScoped(d.Variables, g.Key, items)
		}
		for _, g := range decl.Mounts {
			items := make([]Mount, 0, len(g.Items))
			for _, m := range g.Items {
				items = append(items, Mount{Name: m.Name, Path: m.Path, Claim: m.Claim})
			}
			d.Mounts = appendScoped(d.Mounts, g.Key, items)
		}
		switch {
		case decl.NoProbe:
			d.Probe = nil
		case decl.Probe != nil:
			d.Probe = probe(decl.Probe)
		}
		d.Events = append(d.Events, decl.Events...)
	}
	return d
}

// appendScoped appends items to the group of key, which is added at the end when it is new: the
// order of a JavaScript object's keys.
func appendScoped[T any](groups []Scoped[T], key string, items []T) []Scoped[T] {
	for i := range groups {
		if groups[i].Key == key {
			groups[i].Items = append(groups[i].Items, items...)
			return groups
		}
	}
	return append(groups, Scoped[T]{Key: key, Items: items})
}

func service(ref string, s *extension.Service) *Service {
	out := &Service{Reference: ref, Group: s.Group, Name: s.FullName(), Version: s.Version, Published: s.Image,
		Port: s.Port, Components: s.Components, NoProbe: s.NoProbe, Resources: s.Resources,
		Annotations: s.Annotations}
	if s.Probe != nil {
		out.Probe = probe(s.Probe)
	}
	for _, v := range s.Variables {
		out.Variables = append(out.Variables, variable(v))
	}
	if in := s.Ingress; in != nil {
		out.Ingress = &Ingress{Hosts: in.Hosts, Class: in.Class, Annotations: in.Annotations, Path: in.Path, Default: in.Default}
	}
	return out
}

func variable(v extension.Variable) Variable {
	out := Variable{Name: v.Name, Value: v.Value}
	if s := v.Secret; s != nil {
		out.Secret = &SecretKey{Name: s.Name, Key: s.Key, Optional: s.Optional}
	}
	return out
}

func probe(p *extension.Probe) *Probe {
	return &Probe{Path: p.Path, Port: p.Port, Delay: p.Delay}
}

// ServiceImages are the services whose images toa-push builds: none under mono, which runs
// every service; otherwise each service no composition lists, unless the context takes the
// published images and its extension publishes one.
func ServiceImages(app *toa.Application, deps *Dependencies, mono bool) []*Service {
	if deps == nil || mono {
		return nil
	}
	var out []*Service
	for _, s := range deps.Services {
		if slices.ContainsFunc(app.Compositions, func(c *toa.Composition) bool { return slices.Contains(c.Services, s.Reference) }) {
			continue
		}
		if app.Registry.Services == "published" && s.Published != "" {
			continue
		}
		out = append(out, s)
	}
	return out
}
