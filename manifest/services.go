package manifest

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/toa-deploy/toa-deploy/internal/app/toa"
	"github.com/toa-deploy/toa-deploy/internal/fault"
)

// claim copies the services and says which workloads run each, as Toa's Factory does: mono (the
// workload named mono, when it is not "") runs every one; otherwise the compositions that list a
// service's package run it. A composition that lists a package whose declaration has no service
// is refused.
func claim(app *toa.Application, declared []*Service, mono string) ([]*Service, error) {
	services := make([]*Service, len(declared))
	for i, s := range declared {
		c := *s
		c.Variables = append([]Variable(nil), s.Variables...)
		c.Workload = nil
		services[i] = &c
	}
	var listed []string
	for i, c := range app.Compositions {
		for _, ref := range c.Services {
			if slices.Contains(listed, ref) {
				continue
			}
			listed = append(listed, ref)
			if !slices.ContainsFunc(services, func(s *Service) bool { return s.Reference == ref }) {
				return nil, &fault.Input{File: app.File, Key: fmt.Sprintf("compositions[%d].services", i),
					Message: fmt.Sprintf("Composition '%s' lists '%s', which contributes no service.", c.Name, ref),
					Hint:    "list only extensions that run a service (like exposition), or remove it from `services`"}
			}
		}
	}
	for _, s := range services {
		if mono != "" {
			s.Workload = []string{mono}
			continue
		}
		for _, c := range app.Compositions {
			if slices.Contains(c.Services, s.Reference) {
				s.Workload = append(s.Workload, c.Name)
			}
		}
	}
	return services, nil
}

// reserve is Toa's port reservation: within one workload (a composition's pod, mono's, or a
// service's own) a port is bound once. The readiness probe of every workload is claimed first.
func reserve(app *toa.Application, services []*Service, probe *Probe) error {
	claimed := map[string]map[int32]string{}
	for _, s := range services {
		workloads := s.Workload
		if len(workloads) == 0 {
			workloads = []string{s.Name}
		}
		for _, w := range workloads {
			ports, seen := claimed[w]
			if !seen {
				ports = map[int32]string{}
				if probe != nil {
					ports[probe.Port] = "the readiness probe"
				}
				claimed[w] = ports
			}
			for _, p := range servicePorts(s) {
				if other, taken := ports[p.port]; taken {
					msg := fmt.Sprintf("Port %d is claimed by both %s and %s", p.port, other, p.claimant)
					if len(s.Workload) > 0 {
						msg += fmt.Sprintf(" in '%s'", w)
					}
					return &fault.Input{File: app.File, Message: msg,
						Hint: "the services of one workload share its pod: move a port in the annotation of the package that declares it (" + s.Reference + "), or let the service run on its own"}
				}
				ports[p.port] = p.claimant
			}
		}
	}
	return nil
}

type portClaim struct {
	port     int32
	claimant string
}

func servicePorts(s *Service) []portClaim {
	var out []portClaim
	name := "'" + s.Name + "'"
	if s.Port != 0 {
		out = append(out, portClaim{s.Port, name})
	}
	if s.Probe != nil && !s.NoProbe && s.Probe.Port != s.Port {
		out = append(out, portClaim{s.Probe.Port, "the readiness probe of " + name})
	}
	return out
}

// events tells each deployed component that emits events which of them something consumes:
// TOA_EVENTS_<COMPONENT>, the consumed labels joined by spaces, empty when none is (an absent
// variable means every event). Consumed are the context's `events`, the dependencies' events,
// and the events the deployed components' receivers take from this context (not from a
// `source`).
func events(app *toa.Application, deps *Dependencies, variables []Scoped[Variable]) []Scoped[Variable] {
	consumed := map[string]bool{}
	for _, e := range app.Events {
		consumed[e] = true
	}
	for _, e := range deps.Events {
		consumed[e] = true
	}
	for _, c := range deps.Deployed {
		for _, r := range c.Receivers {
			if r.Source == "" {
				consumed[r.Event] = true
			}
		}
	}
	for _, c := range deps.Deployed {
		if c.Events == nil {
			continue
		}
		var labels []string
		for _, e := range c.Events {
			if consumed[c.Locator.ID+"."+e] {
				labels = append(labels, e)
			}
		}
		variables = appendScoped(variables, c.Locator.Label,
			[]Variable{{Name: "TOA_EVENTS_" + c.Locator.Uppercase, Value: strings.Join(labels, " ")}})
	}
	return variables
}

// fold is what a workload takes on by running services in its pod: their variables, the ports
// they bind (the longest ingress path first) and the probe one of them answers, else the
// dependencies' probe.
func fold(w *Workload, services []*Service, probe *Probe) {
	for _, s := range services {
		for _, v := range s.Variables {
			if !slices.ContainsFunc(w.Variables, func(have Variable) bool { return have.Name == v.Name }) {
				w.Variables = append(w.Variables, v)
			}
		}
		if s.Port != 0 {
			path := "/"
			if s.Ingress != nil && s.Ingress.Path != "" {
				path = s.Ingress.Path
			}
			w.Backends = append(w.Backends, Backend{Port: s.Port, Path: path})
		}
		if s.Probe != nil && !s.NoProbe {
			w.Probe = s.Probe
		}
	}
	if w.Probe == nil {
		w.Probe = probe
	}
	// the more specific prefix first, whatever the ingress controller's tie-break
	sort.SliceStable(w.Backends, func(i, j int) bool { return len(w.Backends[i].Path) > len(w.Backends[j].Path) })
}

// describeServices settles each service: its image, and for one deployed on its own its
// variables (its own, then the global ones and its components'), its probe and resources; the
// ingress of every one that asks for it, with the context's `ingress` filling what it leaves.
func describeServices(app *toa.Application, images Images, services []*Service, variables []Scoped[Variable], probe *Probe) ([]*Service, error) {
	for _, s := range services {
		if len(s.Workload) == 0 {
			img, err := serviceImage(app, images, s)
			if err != nil {
				return nil, err
			}
			s.Image = img
			s.Variables = addVariables(s.Variables, variables, append([]string{Global}, s.Components...))
		}
		switch {
		case s.NoProbe:
			s.Probe = nil
		case s.Probe == nil:
			s.Probe = probe
		}
		if s.Ingress != nil {
			if err := expose(app, s); err != nil {
				return nil, err
			}
		}
	}
	return services, nil
}

// serviceImage is the published image of the runtime's version where the context takes the
// extensions' published images, else the one toa-push builds.
func serviceImage(app *toa.Application, images Images, s *Service) (string, error) {
	if app.Registry.Services == "published" && s.Published != "" {
		return s.Published + ":" + app.Runtime.Version, nil
	}
	if img, ok := images.find(KindService, s.ObjectName()); ok {
		return img.Reference, nil
	}
	return "", fmt.Errorf("no image is given for the service '%s' of %s", s.Name, s.Reference)
}

// expose merges the context's ingress under what the service asks for: what it states wins.
func expose(app *toa.Application, s *Service) error {
	in := *s.Ingress
	if ctx := app.Ingress; ctx != nil {
		if in.Hosts == nil {
			in.Hosts = ctx.Hosts
		}
		if in.Class == "" {
			in.Class = ctx.Class
		}
		if in.Annotations == nil {
			in.Annotations = ctx.Annotations
		}
		if in.Default == nil {
			in.Default = ctx.Default
		}
	}
	s.Ingress = &in
	if in.Hosts == nil {
		return &fault.Input{File: app.File, Key: "ingress.hosts",
			Message: fmt.Sprintf("Service '%s' declares an ingress, but no hosts are defined. Declare them in the context's 'ingress' section.", s.Name),
			Hint:    "like `ingress: {hosts: [api.example.com]}`"}
	}
	if s.Port == 0 {
		return &fault.Input{File: app.File,
			Message: fmt.Sprintf("Service '%s' declares an ingress, but no port.", s.Name),
			Hint:    "the package " + s.Reference + " declares a service no ingress can reach: check its version, or report it to its authors"}
	}
	return nil
}

// describeMono is Toa's mono unit: every component, every variable and mount of any key, every
// service folded in, and one Service and one Ingress that front them all.
func describeMono(app *toa.Application, img Image, deps *Dependencies, variables []Scoped[Variable], services []*Service) *Workload {
	w := &Workload{
		Name:         img.Name,
		Deployment:   img.Name,
		Subject:      "The mono deployment",
		Image:        img.Reference,
		Replicas:     int32(app.Mono.Replicas),
		Resources:    app.Mono.Resources,
		resourcesKey: "mono.resources",
	}
	for _, c := range app.Components {
		w.Components = append(w.Components, c.Locator.Label)
	}
	var keys []string
	for _, g := range variables {
		keys = append(keys, g.Key)
	}
	w.Variables = addVariables(nil, variables, keys)
	keys = nil
	for _, g := range deps.Mounts {
		keys = append(keys, g.Key)
	}
	w.Mounts = addMounts(nil, deps.Mounts, keys)
	if app.Ingress != nil {
		w.Ingress = &Ingress{Hosts: app.Ingress.Hosts, Class: app.Ingress.Class, Annotations: app.Ingress.Annotations, Default: app.Ingress.Default}
	}
	fold(w, services, deps.Probe)
	for _, s := range services {
		if s.Annotations != nil {
			if w.Annotations == nil {
				w.Annotations = map[string]string{}
			}
			for k, v := range s.Annotations {
				w.Annotations[k] = v
			}
		}
		in := s.Ingress
		if in == nil {
			continue
		}
		if w.Ingress == nil {
			w.Ingress = &Ingress{}
		}
		if in.Class != "" {
			w.Ingress.Class = in.Class
		}
		if in.Annotations != nil {
			w.Ingress.Annotations = in.Annotations
		}
		if in.Default != nil {
			w.Ingress.Default = in.Default
		}
		for _, h := range in.Hosts {
			if !slices.Contains(w.Ingress.Hosts, h) {
				w.Ingress.Hosts = append(append([]string(nil), w.Ingress.Hosts...), h)
			}
		}
	}
	return w
}
