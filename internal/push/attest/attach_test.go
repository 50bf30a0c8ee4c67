package attest

import (
	"bytes"
	"io"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

func layerOf(t *testing.T, data []byte) v1.Layer {
	t.Helper()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil })
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// A base whose config has no history for its layers (some have none) still gives toa-push's
// layers their own entries: they are matched from the end.
func TestToaLayersOverABaseWithoutHistory(t *testing.T) {
	base, err := mutate.AppendLayers(empty.Image, layerOf(t, tarOf(t, entry{name: "etc/a", data: "1"})), layerOf(t, tarOf(t, entry{name: "etc/b", data: "2"})))
	if err != nil {
		t.Fatal(err)
	}
	cfg, _ := base.ConfigFile()
	cfg = cfg.DeepCopy()
	cfg.History = nil
	if base, err = mutate.ConfigFile(base, cfg); err != nil {
		t.Fatal(err)
	}
	deps := layerOf(t, tarOf(t, entry{name: "composition/a/node_modules/ms/package.json", data: `{"name":"ms","version":"2.1.3"}`}))
	sources := layerOf(t, tarOf(t, entry{name: "composition/a/index.js", data: "x"}))
	img, err := mutate.Append(base,
		mutate.Addendum{Layer: deps, History: v1.History{CreatedBy: "toa-push: node_modules of a"}},
		mutate.Addendum{Layer: sources, History: v1.History{CreatedBy: "toa-push: sources"}})
	if err != nil {
		t.Fatal(err)
	}
	layers, what, err := toaLayers(img)
	if err != nil {
		t.Fatal(err)
	}
	if len(layers) != 2 || what[0] != "node_modules of a" || what[1] != "sources" {
		t.Fatalf("got %v", what)
	}
	if d1, d2 := digestOfLayer(t, layers[0]), digestOfLayer(t, deps); d1 != d2 {
		t.Errorf("the first of toa-push's layers is %s, want the dependencies %s", d1, d2)
	}
}

func digestOfLayer(t *testing.T, l v1.Layer) string {
	d, err := l.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d.String()
}
