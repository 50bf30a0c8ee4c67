package image

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/toa-deploy/toa-deploy/internal/harness"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"

	"github.com/toa-deploy/toa-deploy/internal/app/toa"
)

// orderLayers records each step it is asked for, with how many layers lie under it.
type orderLayers struct {
	fakeLayers
	mu    sync.Mutex
	calls []string
}

func (o *orderLayers) record(what string, t Target) {
	n := 0
	if t.Base != nil {
		ls, _ := t.Base.Layers()
		n = len(ls)
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.calls = append(o.calls, fmt.Sprintf("%s over %d, config %v", what, n, t.NpmConfig))
}

func (o *orderLayers) Run(_ context.Context, lines []string, components []*toa.Component, t Target) (v1.Layer, error) {
	o.record("run "+strings.Join(lines, "; "), t)
	return harness.TarLayer(map[string][]byte{"etc/" + fmt.Sprint(len(o.calls)): []byte(lines[0])})
}

func (o *orderLayers) Global(_ context.Context, lines []string, t Target) (v1.Layer, error) {
	o.record("global "+strings.Join(lines, "; "), t)
	return harness.TarLayer(map[string][]byte{"usr/local/lib/node_modules/x/" + fmt.Sprint(len(o.calls)): []byte(lines[0])})
}

func (o *orderLayers) Dependencies(ctx context.Context, c *toa.Component, t Target, budget int) ([]v1.Layer, error) {
	o.record("dependencies of "+c.Locator.Label, t)
	return nil, nil
}

// The dependencies image is built in the order of Toa 289's Dockerfile: the build.run steps in
// the order written, each over the layers of those before it, then the components over them all,
// with the configuration of the npm config lines before each; the base's USER is kept.
func TestDependencyImageOrder(t *testing.T) {
	cfg, _ := empty.Image.ConfigFile()
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture, cfg.Config.User = "linux", "amd64", "node"
	base, err := mutate.ConfigFile(empty.Image, cfg)
	if err != nil {
		t.Fatal(err)
	}
	l, _ := harness.TarLayer(map[string][]byte{"bin/sh": []byte("a shell")})
	if base, err = mutate.AppendLayers(base, l); err != nil {
		t.Fatal(err)
	}
	img := &Image{Components: []*toa.Component{{Locator: toa.NewLocator("orders", "shop")}}}
	lines := []string{"echo a", "npm config set legacy-peer-deps true", "npm i -g semver@7.6.3", "echo b", "echo c"}
	layers := &orderLayers{}
	deps, err := dependencyImage(t.Context(), base, img, lines, Target{Platform: v1.Platform{OS: "linux", Architecture: "amd64"}}, layers, v1.Time{})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"run echo a over 1, config map[]",
		"global npm i -g semver@7.6.3 over 2, config map[legacy-peer-deps:true]",
		"run echo b; echo c over 3, config map[legacy-peer-deps:true]",
		"dependencies of shop-orders over 4, config map[legacy-peer-deps:true]",
	}
	if !slices.Equal(layers.calls, want) {
		t.Errorf("steps:\n%s\nwant\n%s", strings.Join(layers.calls, "\n"), strings.Join(want, "\n"))
	}
	got, _ := deps.ConfigFile()
	if got.Config.User != "node" || got.Config.WorkingDir != "/composition" || envOf(got, "NODE_ENV") != "production" {
		t.Errorf("config: %+v", got.Config)
	}
	if ls, _ := deps.Layers(); len(ls) != 4 {
		t.Errorf("%d layers, want the base's and three steps'", len(ls))
	}
}
