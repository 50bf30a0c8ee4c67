package image

import (
	"context"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/toa-deploy/toa-deploy/internal/app/toa"
	"github.com/toa-deploy/toa-deploy/layer"
)

// npmLayers makes the layers with the layer package: npm on the runner, files from the folders.
type npmLayers struct {
	opts []layer.Option
}

// NewLayers returns the layers of an application's images as the layer package makes them,
// configured by the context: the npm registry and proxy it names, the build arguments handed to
// npm, the context's .npmrc.
func NewLayers(app *toa.Application, tools layer.Toolchain, opts ...layer.Option) Layers {
	// the `npm config set` lines of build.run configure each image's installs (Target.NpmConfig)
	base := []layer.Option{
		layer.WithContextRoot(app.Root),
		layer.WithRegistry(app.Runtime.Registry, app.Runtime.Proxy),
		layer.WithArguments(app.Registry.Build.Arguments...),
		layer.WithToolchain(tools),
	}
	return &npmLayers{opts: append(base, opts...)}
}

func (n *npmLayers) Sources(components []*toa.Component) (v1.Layer, error) {
	return layer.SourcesOf(components, n.opts...)
}

func (n *npmLayers) Dependencies(ctx context.Context, c *toa.Component, t Target, budget int) ([]v1.Layer, error) {
	return layer.DependencyLayers(ctx, c, platformOf(t), budget, n.with(t)...)
}

func (n *npmLayers) Global(ctx context.Context, lines []string, t Target) (v1.Layer, error) {
	return layer.Global(ctx, lines, platformOf(t), n.with(t)...)
}

// Run is the layer of the build.run lines that run in the base, for one platform.
func (n *npmLayers) Run(ctx context.Context, lines []string, components []*toa.Component, t Target) (v1.Layer, error) {
	return layer.Run(ctx, lines, components, platformOf(t), n.with(t)...)
}

// CheckBase says what the runner lacks to do the work of one platform inside its base.
func (n *npmLayers) CheckBase(ctx context.Context, work layer.BaseWork, t Target) error {
	return layer.CheckBase(ctx, work, platformOf(t), n.with(t)...)
}

// CheckRunner says what the runner lacks to run the install scripts of one platform inside its
// base whatever its libc, before it is unpacked.
func (n *npmLayers) CheckRunner(ctx context.Context, work layer.BaseWork, t Target) error {
	return layer.CheckRunner(ctx, work, platformOf(t), n.with(t)...)
}

// InBaseWhateverLibc says whether the work of one platform runs inside its base whatever its libc.
func (n *npmLayers) InBaseWhateverLibc(ctx context.Context, work layer.BaseWork, t Target) (bool, error) {
	return layer.InBaseWhateverLibc(ctx, work, platformOf(t), n.with(t)...)
}

func (n *npmLayers) with(t Target) []layer.Option {
	opts := append(append([]layer.Option(nil), n.opts...), layer.WithBaseNode(t.NodeVersion), layer.WithNpmConfig(t.NpmConfig))
	if t.Base != nil {
		opts = append(opts, layer.WithBase(t.Base))
	}
	return opts
}

func platformOf(t Target) layer.Platform {
	variant := t.Platform.Variant
	if t.Platform.Architecture == "arm64" && variant == "v8" {
		variant = ""
	}
	return layer.Platform{OS: t.Platform.OS, Architecture: t.Platform.Architecture, Variant: variant, Libc: t.Libc}
}

// UnpackBase unpacks the base of one platform where the work in it runs whatever its libc, and
// says that libc (layer.UnpackBase).
func (n *npmLayers) UnpackBase(ctx context.Context, work layer.BaseWork, t Target) (string, bool, error) {
	return layer.UnpackBase(ctx, work, platformOf(t), n.with(t)...)
}
