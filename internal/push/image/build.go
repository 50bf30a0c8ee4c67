package image

import (
	"context"
	"fmt"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/toa-deploy/toa-deploy/internal/app/toa"
	"github.com/toa-deploy/toa-deploy/layer"
)

// Layers makes the layers of an application's images. The layer package implements it; tests
// may give a fake. A nil layer with a nil error means "nothing to add" (a component with no
// dependencies).
type Layers interface {
	// Sources is one layer with the sources of the components, under /composition/<label>/.
	Sources(components []*toa.Component) (v1.Layer, error)
	// Dependencies is the component's node_modules installed for one platform of the base, as
	// at most budget layers (layer.DependencyLayers): the first holds npm's metadata.
	Dependencies(ctx context.Context, c *toa.Component, p Target, budget int) ([]v1.Layer, error)
	// Global is what `npm i -g` lines install into /usr/local, for one platform.
	Global(ctx context.Context, lines []string, p Target) (v1.Layer, error)
}

// Target is one platform an image is built for, with what the install must know of its base.
type Target struct {
	Platform    v1.Platform
	Libc        string // "glibc" or "musl"
	NodeVersion string // the base's NODE_VERSION, "" when it does not say
	// Base is the base image of the platform, in which install scripts and build.run lines run
	// (package sandbox), with the layers of the build.run steps before the work; nil where
	// nothing may run in it.
	Base v1.Image
	// NpmConfig is the configuration of build.run's `npm config set` lines written before the
	// work: what its npm reads.
	NpmConfig map[string]string
}

// runLayers also makes the layer of build.run lines that are not npm commands, run in the base
// of the platform (Target.Base) in /composition, where the components' package files are.
type runLayers interface {
	Run(ctx context.Context, lines []string, components []*toa.Component, t Target) (v1.Layer, error)
}

// maxLayers is about how many layers an image may have in all: past it, neighbouring components
// share layers.
const maxLayers = 60

// groups splits components into at most n groups of neighbours, deterministically: the first
// groups take one more when they do not divide evenly.
func groups(components []*toa.Component, n int) [][]*toa.Component {
	if n <= 0 {
		n = 1
	}
	if n >= len(components) {
		out := make([][]*toa.Component, len(components))
		for i, c := range components {
			out[i] = []*toa.Component{c}
		}
		return out
	}
	out := make([][]*toa.Component, 0, n)
	size, extra := len(components)/n, len(components)%n
	for i := 0; i < len(components); {
		k := size
		if extra > 0 {
			k, extra = k+1, extra-1
		}
		out = append(out, components[i:i+k])
		i += k
	}
	return out
}

// dependencyImage is the base of one platform, the layers of build.run's steps and each
// component's node_modules, in the order of Toa 289's dependencies.Dockerfile: the lines in the
// order written (the context's, then the components'), each shell step run in the base with the
// layers of the steps before it, each npm global install in its place; then the components'
// dependencies, whose install scripts run in the base with every step's layer under them. The
// config is 289's: NODE_ENV=production, WorkingDir /composition, the base's USER.
// created is the time of its config and history: layer.SourceDateEpoch's.
func dependencyImage(ctx context.Context, base v1.Image, img *Image, lines []string, t Target, layers Layers, created v1.Time) (v1.Image, error) {
	var adds []mutate.Addendum
	below := base
	for _, step := range layer.Steps(lines) {
		at := t
		at.Base, at.NpmConfig = below, step.Config
		l, add, err := stepLayer(ctx, step, img, at, layers, created)
		if err != nil {
			return nil, err
		}
		if l == nil {
			continue
		}
		adds = append(adds, add)
		if below, err = mutate.Append(below, add); err != nil {
			return nil, err
		}
	}
	budget := dependencyBudget(base, len(adds), len(img.Components))
	at := t
	at.Base, at.NpmConfig = below, layer.NpmConfig(lines)
	for _, c := range img.Components {
		ls, err := layers.Dependencies(ctx, c, at, budget)
		if err != nil {
			return nil, err // the layer's error says which install, for which platform
		}
		adds = append(adds, dependencyAddenda(ls, c.Locator.Label, created)...)
	}
	out, err := mutate.Append(base, adds...)
	if err != nil {
		return nil, err
	}
	cfg, err := out.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("read the config of the base: %w", err)
	}
	cfg = cfg.DeepCopy()
	cfg.Config.Env = setEnv(cfg.Config.Env, "NODE_ENV", "production")
	cfg.Config.WorkingDir = "/composition"
	// the base's USER stays, as 289's images kept it (FROM the base, no USER of their own)
	out, err = mutate.ConfigFile(out, cfg)
	if err != nil {
		return nil, err
	}
	return mutate.CreatedAt(out, created)
}

// stepLayer is the layer of one build.run step over t.Base, and its place in the image.
func stepLayer(ctx context.Context, step layer.Step, img *Image, t Target, layers Layers, created v1.Time) (v1.Layer, mutate.Addendum, error) {
	if len(step.Shell) > 0 {
		runner, ok := layers.(runLayers)
		if !ok {
			return nil, mutate.Addendum{}, fmt.Errorf("build.run `%s`: these layers cannot run lines in the base", step.Shell[0])
		}
		l, err := runner.Run(ctx, step.Shell, img.Components, t)
		if err != nil || l == nil {
			return nil, mutate.Addendum{}, err
		}
		return l, addendum(l, "RUN "+strings.Join(step.Shell, "; "), created), nil
	}
	l, err := layers.Global(ctx, step.Global, t)
	if err != nil || l == nil {
		return nil, mutate.Addendum{}, err
	}
	return l, addendum(l, "npm i -g "+strings.Join(step.Global, "; "), created), nil
}

// sourcesImage lays the sources layers over one platform's dependencies image and sets the
// command, in exec form so that a base without a shell works.
func sourcesImage(deps v1.Image, sources []v1.Layer, command []string, created v1.Time) (v1.Image, error) {
	adds := make([]mutate.Addendum, len(sources))
	for i, l := range sources {
		adds[i] = addendum(l, "sources", created)
	}
	out, err := mutate.Append(deps, adds...)
	if err != nil {
		return nil, err
	}
	cfg, err := out.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("read the config of the dependencies image: %w", err)
	}
	cfg = cfg.DeepCopy()
	cfg.Config.Cmd = command
	cfg.Config.WorkingDir = "/composition"
	cfg.Config.Env = setEnv(cfg.Config.Env, "NODE_ENV", "production")
	out, err = mutate.ConfigFile(out, cfg)
	if err != nil {
		return nil, err
	}
	return mutate.CreatedAt(out, created)
}

func addendum(l v1.Layer, createdBy string, created v1.Time) mutate.Addendum {
	mt := types.OCILayer // whatever the layer says of itself: every manifest toa-push writes is OCI
	if m, err := l.MediaType(); err == nil && m == types.OCILayerZStd {
		mt = m
	}
	return mutate.Addendum{Layer: l, History: v1.History{CreatedBy: historyPrefix + createdBy, Created: created},
		MediaType: mt}
}

func setEnv(env []string, key, value string) []string {
	out := make([]string, 0, len(env)+1)
	for _, e := range env {
		if !strings.HasPrefix(e, key+"=") {
			out = append(out, e)
		}
	}
	return append(out, key+"="+value)
}

func envOf(cfg *v1.ConfigFile, key string) string {
	for _, e := range cfg.Config.Env {
		if v, ok := strings.CutPrefix(e, key+"="); ok {
			return v
		}
	}
	return ""
}

// command is the image's command: `toa compose <labels>`, or `toa mono <labels>`.
func command(img *Image) []string {
	verb := "compose"
	if img.Composition == nil {
		verb = "mono"
	}
	cmd := []string{"toa", verb}
	for _, c := range img.Components {
		cmd = append(cmd, c.Locator.Label)
	}
	return cmd
}

// index makes an OCI image index of one image per platform, with the annotations given.
func index(images []v1.Image, targets []Target, annotations map[string]string) (v1.ImageIndex, error) {
	var adds []mutate.IndexAddendum
	for i, img := range images {
		p := targets[i].Platform
		mt, err := img.MediaType()
		if err != nil {
			return nil, err
		}
		adds = append(adds, mutate.IndexAddendum{Add: plainImage{img}, Descriptor: v1.Descriptor{MediaType: mt, Platform: &p}})
	}
	idx := mutate.AppendManifests(mutate.IndexMediaType(empty.Index, types.OCIImageIndex), adds...)
	if len(annotations) > 0 {
		idx = mutate.Annotations(idx, annotations).(v1.ImageIndex)
	}
	return idx, nil
}

// plainImage is an image that says it is no artifact: go-containerregistry describes an image
// in an index with its config's media type as artifactType (what the referrers API reports of a
// manifest without one), which for an image says nothing an index's reader needs: 56 bytes a
// platform, in every index a code change sends.
type plainImage struct{ v1.Image }

func (plainImage) ArtifactType() (string, error) { return "", nil }
