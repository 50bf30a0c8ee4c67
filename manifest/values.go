// Package manifest makes the application's Kubernetes objects (a manifest in Kubernetes' own
// words: objects written down to be applied, not Toa's manifest.toa.yaml, which internal/push/toa
// reads), the ones Toa 289's chart rendered
// (reference §5), as typed k8s.io/api values instead of text templates. It works in two steps, as
// Toa did: Describe turns the application and its images into Values, one Workload per
// Deployment with its variables, mounts, probe and resources settled (Toa's describe()); Objects
// turns Values into Deployments and Services (the chart's templates). Kustomization and
// WriteKustomization then write them down, with the images pinned by digest, as the folder
// toa-apply (and kubectl apply -k) reads.
package manifest

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/toa-deploy/toa-deploy/internal/app/toa"
)

// Values are what Toa's chart was rendered from (reference §5.2), settled: every default taken,
// every variable in place.
type Values struct {
	Context      string      // the context's name
	Credentials  string      // the image pull Secret every composition names, or ""
	Compositions []*Workload // a Deployment each, named as the plan names its image
	Components   []string    // the labels of the components deployed: a Service each
	Services     []*Service  // the extensions' services: objects named by Service.ObjectName
	Mono         *Workload   // the one Deployment of --mono, with its Service and Ingress; nil otherwise
}

// Kind is what a workload runs.
type Kind int

const (
	KindComposition Kind = iota + 1 // a composition's components
	KindMono                        // every component and every service: --mono
	KindService                     // an extension service deployed on its own
)

// Image is the container image of one workload, as the plan names it.
type Image struct {
	Kind Kind
	// Name is the workload's, which its image, its Deployment and (mono's) its Service and
	// Ingress take: "composition-front", "mono", "extension-exposition-gateway".
	Name string
	// Composition is the name of the composition it runs, for KindComposition.
	Composition string
	// Reference is what its container names: the repository, with the tag where it is known
	// (the kustomization pins it by digest, or sets the tag where it is not known here).
	Reference string
}

// Images are the images of the application's workloads, as the plan hands them over, and
// whether the application is deployed as one mono workload.
type Images struct {
	Mono bool
	List []Image
}

// find is the image of kind whose Composition (for KindComposition) or Name (for KindService)
// is name; mono's for KindMono.
func (im Images) find(kind Kind, name string) (Image, bool) {
	for _, img := range im.List {
		if img.Kind != kind {
			continue
		}
		if kind == KindMono || (kind == KindComposition && img.Composition == name) || (kind == KindService && img.Name == name) {
			return img, true
		}
	}
	return Image{}, false
}

// Workload is one Deployment as Toa's values describe it: a composition's, or mono's.
type Workload struct {
	Name       string         // the composition's name, or mono's: its pods' toa/composition label
	Deployment string         // its Deployment's name, its image's: "composition-front", "mono"
	Subject    string         // how messages name it: "Composition 'edge'"
	Image      string         // the container's image: the repository, and its tag when known
	Replicas   int32          // 0 takes the chart's default, 2
	Components []string       // the labels of the components it runs
	Hosted     []string       // the names of the extension services it runs
	Services   []string       // the packages of those services: TOA_SERVICES
	Resources  *toa.Resources // settled: never nil; None deploys without
	Variables  []Variable
	Mounts     []Mount
	Probe      *Probe
	Backends   []Backend // the ports its services bind, longest ingress path first
	// Ingress and Annotations are mono's: one Ingress and one Service front every service.
	Ingress     *Ingress
	Annotations map[string]string

	// resourcesKey says where Resources came from, for messages: "compositions[0].resources"
	// or "resources".
	resourcesKey string
}

// Variable is an environment variable: a value, or a reference to a key of a Secret.
type Variable struct {
	Name   string
	Value  string
	Secret *SecretKey
}

// SecretKey is a key of a Secret in the workload's namespace.
type SecretKey struct {
	Name, Key string
	Optional  bool
}

// Mount is a PersistentVolumeClaim mounted into the workload's container.
type Mount struct {
	Name, Path, Claim string
}

// Probe is the HTTP endpoint the startup and readiness probes ask.
type Probe struct {
	Path  string
	Port  int32
	Delay int32 // seconds before the first startup probe; 0 for none
}

// Backend is a port a service inside the workload serves, and the ingress path to it.
type Backend struct {
	Port int32
	Path string
}

// Global is the Scoped key of what every workload gets.
const Global = "global"

// Scoped are items for every workload (Key Global) or for the workloads that run one component
// (Key is its label), as Toa's dependencies declare variables and mounts.
type Scoped[T any] struct {
	Key   string
	Items []T
}

// Dependencies are what the application's extensions and connectors declare for its workloads:
// the merged results of their deployment() (reference §4.2, Merge). An application without
// extensions has none.
type Dependencies struct {
	Variables []Scoped[Variable] // in Toa's merge order, which is the order they are added in
	Mounts    []Scoped[Mount]
	Probe     *Probe     // the readiness probe of every workload (telemetry's)
	Services  []*Service // the extensions' services
	Events    []string   // the event labels the dependencies consume
	// Deployed are the components of the dependencies' instances: the context's and the ones
	// the extensions bring. Each that emits events is told which are consumed (TOA_EVENTS_*).
	Deployed []*toa.Component
}

// Describe settles the application's values as Toa's describe() does (reference §3.3, §3.4,
// §5.3, §5.5, §5.6): a workload per composition with its image (or, when the images are of
// mono, the one mono workload), the context's variables (TOA_CONTEXT and TOA_ENV first)
// and the dependencies' ones, deduplicated by name with the first kept, the extension services
// each composition runs, the others as services of their own, every resources settled and
// NODE_OPTIONS sized by the memory limit. Toa's refusals are *fault.Input: resources nowhere, a
// port two services of one workload claim, a service that asks for an ingress without hosts or
// port, a composition that lists what contributes no service.
func Describe(app *toa.Application, images Images, deps *Dependencies) (*Values, error) {
	if deps == nil {
		deps = &Dependencies{}
	}
	v := &Values{Context: app.Name, Credentials: app.Registry.Credentials}
	var mono Image
	if images.Mono {
		var ok bool
		if mono, ok = images.find(KindMono, ""); !ok {
			return nil, fmt.Errorf("no image is given for the mono deployment")
		}
	}
	services, err := claim(app, deps.Services, mono.Name)
	if err != nil {
		return nil, err
	}
	if err := reserve(app, services, deps.Probe); err != nil {
		return nil, err
	}
	variables := events(app, deps, globals(app, deps.Variables))
	if images.Mono {
		v.Mono = describeMono(app, mono, deps, variables, services)
		v.Components = v.Mono.Components
		if err := settleResources(app, v); err != nil {
			return nil, err
		}
		return v, nil
	}
	for i, c := range app.Compositions {
		img, ok := images.find(KindComposition, c.Name)
		if !ok {
			return nil, fmt.Errorf("no image is given for composition '%s'", c.Name)
		}
		w := &Workload{
			Name:       c.Name,
			Deployment: img.Name,
			Subject:    fmt.Sprintf("Composition '%s'", c.Name),
			Image:      img.Reference,
		}
		for _, m := range c.Components {
			w.Components = append(w.Components, m.Locator.Label)
		}
		var claimed []*Service
		keys := append([]string{Global}, w.Components...)
		for _, s := range services {
			if slices.Contains(s.Workload, c.Name) {
				claimed = append(claimed, s)
				keys = append(keys, s.Components...)
			}
		}
		w.Variables = addVariables(nil, variables, keys)
		w.Mounts = addMounts(nil, deps.Mounts, keys)
		if len(claimed) > 0 {
			w.Services = c.Services
			for _, s := range claimed {
				w.Hosted = append(w.Hosted, s.Name)
			}
			fold(w, claimed, deps.Probe)
		}
		if w.Probe == nil {
			w.Probe = deps.Probe
		}
		w.Resources, w.resourcesKey = c.Resources, fmt.Sprintf("compositions[%d].resources", i)
		if !c.Declared {
			w.resourcesKey = "resources"
		}
		v.Compositions = append(v.Compositions, w)
	}
	for _, w := range v.Compositions {
		for _, label := range w.Components {
			if !slices.Contains(v.Components, label) {
				v.Components = append(v.Components, label)
			}
		}
	}
	if v.Services, err = describeServices(app, images, services, variables, deps.Probe); err != nil {
		return nil, err
	}
	if err := settleResources(app, v); err != nil {
		return nil, err
	}
	return v, nil
}

// globals returns the dependencies' variables with the context's own in the global group, as
// Toa's describe() puts them: TOA_CONTEXT and TOA_ENV first, then atomicity, outbox and inbox.
// A global group the dependencies lack is added after theirs, as `variables.global ??= []` does.
func globals(app *toa.Application, declared []Scoped[Variable]) []Scoped[Variable] {
	out := make([]Scoped[Variable], 0, len(declared)+1)
	at := -1
	for i, s := range declared {
		if s.Key == Global && at < 0 {
			at = i
		}
		out = append(out, Scoped[Variable]{Key: s.Key, Items: append([]Variable(nil), s.Items...)})
	}
	if at < 0 {
		out = append(out, Scoped[Variable]{Key: Global})
		at = len(out) - 1
	}
	g := []Variable{{Name: "TOA_CONTEXT", Value: app.Name}, {Name: "TOA_ENV", Value: app.Environment}}
	g = append(g, out[at].Items...)
	if a := app.Atomicity; a != nil {
		g = append(g, Variable{Name: "TOA_ATOMICITY_REDIS", Value: strings.Join(a.Redis, " ")})
		if a.Interval != 0 {
			g = append(g, Variable{Name: "TOA_ATOMICITY_INTERVAL", Value: strconv.Itoa(a.Interval)})
		}
	}
	if o := app.Outbox; o != nil {
		for _, f := range []struct {
			name  string
			value *int
		}{{"TOA_OUTBOX_INTERVAL", o.Interval}, {"TOA_OUTBOX_BATCH", o.Batch}, {"TOA_OUTBOX_RETENTION", o.Retention}} {
			if f.value != nil {
				g = append(g, Variable{Name: f.name, Value: strconv.Itoa(*f.value)})
			}
		}
	}
	if in := app.Inbox; in != nil && in.Retention != 0 {
		g = append(g, Variable{Name: "TOA_INBOX_RETENTION", Value: strconv.Itoa(in.Retention)})
	}
	out[at].Items = g
	return out
}

// addVariables is Toa's addVariables: the groups whose key is one of keys, in the groups' order,
// each variable once by name, the first one kept.
func addVariables(to []Variable, groups []Scoped[Variable], keys []string) []Variable {
	for _, g := range groups {
		if !slices.Contains(keys, g.Key) {
			continue
		}
		for _, v := range g.Items {
			if !slices.ContainsFunc(to, func(have Variable) bool { return have.Name == v.Name }) {
				to = append(to, v)
			}
		}
	}
	return to
}

// addMounts is Toa's addMounts: as addVariables, by the mount's name.
func addMounts(to []Mount, groups []Scoped[Mount], keys []string) []Mount {
	for _, g := range groups {
		if !slices.Contains(keys, g.Key) {
			continue
		}
		for _, m := range g.Items {
			if !slices.ContainsFunc(to, func(have Mount) bool { return have.Name == m.Name }) {
				to = append(to, m)
			}
		}
	}
	return to
}
