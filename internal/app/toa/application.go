// Package toa reads a Toa application as Toa 1.0.0-alpha.289 reads it: the context file
// (context.toa.yaml) with its environment overrides, the components and their manifests, and the
// compositions, declared and derived. Everything else in toa-deploy reads the application through
// the values this package returns; every mistake in the user's files is an *fault.Input that names the
// file, the key and the line.
package toa

import "encoding/json"

// Application is a loaded Toa context: what `toa deploy` would deploy for one environment.
type Application struct {
	Root        string // the context's folder, absolute
	File        string // its context.toa.yaml, absolute
	Environment string // the first name of the environment chain: TOA_ENV of every workload

	Name        string
	Version     string
	Description string

	Runtime  Runtime
	Registry Registry

	Components   []*Component   // in folder order
	Compositions []*Composition // the declared ones in file order, then one per unlisted component

	Resources *Resources // the default for every workload; nil when the context declares none
	Mono      Mono
	Ingress   *Ingress

	// Annotations are the context's settings for each extension and connector, by package name
	// (`amqp: ...` at the top level is the annotation of @toa.io/bindings.amqp), in file order.
	Annotations []Annotation

	Atomicity *Atomicity
	Outbox    *Outbox
	Inbox     *Inbox
	Events    []string
	Evicted   *Evicted

	Warnings []string // what was read but deserves the user's attention
}

// Runtime is the Toa runtime the images run, and where npm installs from.
type Runtime struct {
	Version string
	// VersionSource says where Version came from: "context.toa.yaml" or the installed package.
	VersionSource string
	Registry      string // npm registry URI, may be empty
	Proxy         string // npm proxy URI, may be empty
}

// DefaultPlatforms are what an image is built for when the context does not say: a new slice
// each call, the caller's to change.
func DefaultPlatforms() []string { return []string{"linux/amd64", "linux/arm/v7", "linux/arm64"} }

// Registry is where images go and how they are built.
type Registry struct {
	Base string // the prefix of every image reference, like "localhost:5000" or "registry.example.com/acme"
	// Platforms are what every image is built for.
	Platforms []string
	// PlatformsDefaulted is true when the context named no platforms: a default platform the base
	// lacks is then left out with a warning instead of refused.
	PlatformsDefaulted bool
	// PlatformsFromHost is true for `platforms: ~`: the runner's own architecture.
	PlatformsFromHost bool
	Build             Build
	Credentials       string // the name of a Secret of type kubernetes.io/dockerconfigjson
	Services          string // "build" or "published"
}

// Build is `registry.build`: the base image for every composition that names none, the names of
// environment variables handed to npm, and extra lines to run.
type Build struct {
	Image     string
	Arguments []string
	Run       string
}

// Pair is a [request, limit] pair of Kubernetes quantities, as written.
type Pair struct{ Request, Limit string }

// Resources are a workload's requests and limits. A nil *Resources means the key is absent;
// None means `resources: null`, which deploys without any.
type Resources struct {
	None   bool
	CPU    *Pair
	Memory *Pair
}

// Mono holds the settings of the single `mono` deployment of `--mono`.
type Mono struct {
	Replicas  int        // 0 when not set
	Resources *Resources // nil when not set
}

// Ingress is the context's defaults for every service's ingress.
type Ingress struct {
	Hosts       []string
	Class       string
	Annotations map[string]string
	Default     *bool
}

// Annotation is the context's setting for one package, as the package's deployment() receives it.
type Annotation struct {
	Package string
	Value   any
	// Raw is Value as JSON with its mappings' keys in the file's order, as JavaScript keeps an
	// object's; nil where that order is not known (a value merged from two places).
	Raw json.RawMessage
}

// Atomicity is `atomicity`: where locks are kept.
type Atomicity struct {
	Redis    []string
	Interval int
}

// Outbox is `outbox`; a zero field was not set.
type Outbox struct {
	Interval, Batch, Retention *int
}

// Inbox is `inbox`.
type Inbox struct {
	Retention int
}

// Evicted lists components and services left out of the deployment.
type Evicted struct {
	Components []string
	Services   []string
}

// Composition is one image and one Deployment: a group of components.
type Composition struct {
	Name       string
	Declared   bool         // false for the composition derived for an unlisted component
	Image      string       // the base image the context gives it, may be empty
	Components []*Component // in the order the context lists them
	Resources  *Resources   // nil when it declares none (it then takes the context's)
	Services   []string     // package names of the extension services it runs in its pod
}

// Component looks a component up by its id.
func (a *Application) Component(id string) *Component {
	for _, c := range a.Components {
		if c.Locator.ID == id {
			return c
		}
	}
	return nil
}

// Composition looks a composition up by its name.
func (a *Application) Composition(name string) *Composition {
	for _, c := range a.Compositions {
		if c.Name == name {
			return c
		}
	}
	return nil
}
