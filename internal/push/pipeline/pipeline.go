// Package pipeline is toa-push's job, from the context's folder to the kustomization: load the
// application, ask its extensions what they deploy, resolve each base once, plan every image (a
// plan made whole, never changed afterwards), make the Kubernetes objects once, build and push
// what the destination lacks, and write the kustomization pinned by digest. It is a room of its
// own so that cmd/toa-push holds only flags, output and exit codes, and so that the whole job is
// tested without the binary.
//
// Push, Plan and PushLayout are the three things toa-push does; each takes a context first and
// is tuned by options. Data flows one way: toa → extension → image (plan) → manifest (objects,
// kustomization) → image (push) → manifest (write).
package pipeline

import (
	"io"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/toa-deploy/toa-deploy/internal/fsys"
	"github.com/toa-deploy/toa-deploy/internal/push/attest"
	"github.com/toa-deploy/toa-deploy/internal/push/image"
	"github.com/toa-deploy/toa-deploy/internal/registry"
	"github.com/toa-deploy/toa-deploy/internal/sign"
	"github.com/toa-deploy/toa-deploy/layer"
)

// DefaultKustomization is where the kustomization goes when WithKustomization does not say.
const DefaultKustomization = "deployment"

// Option tunes Push, Plan and PushLayout.
type Option func(*options)

type options struct {
	mono           bool
	kustomization  string
	ociLayout      string
	registries     *registry.Registries
	resolveTimeout time.Duration
	cacheDir       string
	log            logrus.FieldLogger
	warn           func(string)
	events         func(image.Event)
	extensionOut   io.Writer
	toolchain      *layer.Toolchain
	layers         func(*Planned) image.Layers
	jobs           int
	now            func() time.Time
	planning       bool // Plan: a base out of reach is planned from the cache
	sbom           attest.Format
	signer         *sign.Signer
	compression    layer.Compression
	// scriptsOnRunner and scriptNetwork: where and with which network other people's code runs
	// (WithScripts)
	scriptsOnRunner bool
	scriptNetwork   string

	artifact, artifactSource, artifactRevision string // WithArtifact
}

// WithMono plans one mono image and deployment, as Toa's --mono.
func WithMono(mono bool) Option { return func(o *options) { o.mono = mono } }

// WithAttestation attaches to every image Push builds an SBOM per platform in format and
// provenance (attest.None: neither), and, with a signer, cosign signatures of the images and of
// what is attached. Without it nothing is attached.
func WithAttestation(format attest.Format, signer *sign.Signer) Option {
	return func(o *options) { o.sbom, o.signer = format, signer }
}

// WithCompression sets how the layers toa-push makes are compressed. Default: layer.Gzip.
func WithCompression(c layer.Compression) Option { return func(o *options) { o.compression = c } }

// WithScripts sets where the install scripts of a target that is the runner's own platform run
// (onRunner: with npm on the runner, as layer.WithScriptsOnRunner; otherwise in the base, like
// every other target's) and the network of every script and build.run line in a base: "" for the
// runner's, "none" for loopback only.
func WithScripts(onRunner bool, network string) Option {
	return func(o *options) { o.scriptsOnRunner, o.scriptNetwork = onRunner, network }
}

// WithKustomization sets the folder the kustomization goes to. Default: DefaultKustomization,
// or, with WithOCILayout, the layout's kustomization folder.
func WithKustomization(dir string) Option { return func(o *options) { o.kustomization = dir } }

// WithOCILayout writes the images into an OCI image layout in dir instead of pushing them.
func WithOCILayout(dir string) Option { return func(o *options) { o.ociLayout = dir } }

// WithRegistries sets how registries are reached: credentials, TLS, mirrors. Default:
// registry.NewRegistries() with none of its options.
func WithRegistries(r *registry.Registries) Option { return func(o *options) { o.registries = r } }

// WithResolveTimeout bounds the resolution of each base. Default: 20 s.
func WithResolveTimeout(d time.Duration) Option { return func(o *options) { o.resolveTimeout = d } }

// WithCacheDir sets toa-push's cache: layers, npm's cache, what was learnt of the bases.
// Default: fsys.CacheRoot().
func WithCacheDir(dir string) Option { return func(o *options) { o.cacheDir = dir } }

// WithLogger receives what is done, step by step (debug), and what was written (info).
func WithLogger(l logrus.FieldLogger) Option { return func(o *options) { o.log = l } }

// WithWarnings receives what deserves the user's attention and does not stop the run.
func WithWarnings(warn func(string)) Option { return func(o *options) { o.warn = warn } }

// WithEvents receives each step of each image, for a progress display.
func WithEvents(events func(image.Event)) Option { return func(o *options) { o.events = events } }

// WithExtensionOutput receives what the extensions' packages print while they are asked.
func WithExtensionOutput(w io.Writer) Option { return func(o *options) { o.extensionOut = w } }

// WithToolchain gives the runner's node and npm versions instead of asking them.
func WithToolchain(t layer.Toolchain) Option { return func(o *options) { o.toolchain = &t } }

// WithLayers replaces the layer package's layers (npm on the runner), for tests.
func WithLayers(l image.Layers) Option {
	return func(o *options) { o.layers = func(*Planned) image.Layers { return l } }
}

// WithJobs sets how many images are built at once. Default: image.Push's.
func WithJobs(n int) Option { return func(o *options) { o.jobs = n } }

// withClock replaces the clock that dates cached bases, for tests.
func withClock(now func() time.Time) Option { return func(o *options) { o.now = now } }

func newOptions(opts []Option) (*options, error) {
	o := &options{resolveTimeout: 20 * time.Second, now: time.Now, sbom: attest.None}
	for _, opt := range opts {
		opt(o)
	}
	if o.log == nil {
		l := logrus.New()
		l.SetOutput(io.Discard)
		o.log = l
	}
	if o.warn == nil {
		o.warn = func(w string) { o.log.Warn(w) }
	}
	if o.events == nil {
		o.events = func(image.Event) {}
	}
	if o.cacheDir == "" {
		dir, err := fsys.CacheRoot()
		if err != nil {
			return nil, err
		}
		o.cacheDir = dir
	}
	if o.registries == nil {
		r, err := registry.NewRegistries()
		if err != nil {
			return nil, err
		}
		o.registries = r
	}
	if o.layers == nil {
		o.layers = func(p *Planned) image.Layers {
			opts := []layer.Option{layer.WithCacheDir(o.cacheDir), layer.WithWarnings(o.warn), layer.WithEpoch(p.epoch), layer.WithHolds(p.holds)}
			if o.compression != "" {
				opts = append(opts, layer.WithCompression(o.compression))
			}
			if p.runner != nil {
				opts = append(opts, layer.WithRunner(p.runner))
			}
			if o.scriptsOnRunner {
				opts = append(opts, layer.WithScriptsOnRunner())
			}
			if o.scriptNetwork != "" {
				opts = append(opts, layer.WithScriptNetwork(o.scriptNetwork))
			}
			return image.NewLayers(p.App, p.toolchain, opts...)
		}
	}
	return o, nil
}

// kustomizationDir is where the kustomization goes: WithKustomization's folder, else the
// layout's kustomization folder, else DefaultKustomization.
func (o *options) kustomizationDir() string {
	switch {
	case o.kustomization != "":
		return o.kustomization
	case o.ociLayout != "":
		return LayoutKustomization(o.ociLayout)
	}
	return DefaultKustomization
}
