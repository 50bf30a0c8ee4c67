package image

import (
	"bytes"
	"encoding/json"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// withoutLayerTimes is img with a config whose history entries of toa-push's layers hold no
// time: every one is the config's own "created" (layer.SourceDateEpoch's), which the config
// says once. An image holds one entry per layer, about 25 with node_modules split, and a code
// change sends the config again: 33 bytes an entry. go-containerregistry writes a time it has
// not as 0001-01-01 (its History has no omitempty that works on a time), so the entries are cut
// from the config's bytes here, after the last mutate (which would write them again); a config
// read back and mutated once more (the sources over a dependencies image) is cut again.
func withoutLayerTimes(img v1.Image) (v1.Image, error) {
	raw, err := img.RawConfigFile()
	if err != nil {
		return nil, err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	out := raw
	for _, t := range []v1.Time{cfg.Created, {}} {
		at, err := json.Marshal(t)
		if err != nil {
			return nil, err
		}
		// JSON of a struct in field order: created comes first, before created_by (no author)
		timed := []byte(`{"created":` + string(at) + `,"created_by":"` + historyPrefix)
		out = bytes.ReplaceAll(out, timed, []byte(`{"created_by":"`+historyPrefix))
	}
	if bytes.Equal(out, raw) {
		return img, nil
	}
	m, err := img.Manifest()
	if err != nil {
		return nil, err
	}
	m = m.DeepCopy()
	if m.Config.Digest, m.Config.Size, err = v1.SHA256(bytes.NewReader(out)); err != nil {
		return nil, err
	}
	rawManifest, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	return &configImage{Image: img, config: out, manifest: m, raw: rawManifest}, nil
}

// historyPrefix opens the history entry of every layer toa-push lays (addendum).
const historyPrefix = "toa-push: "

// configImage is an image with other config bytes over the same layers.
type configImage struct {
	v1.Image
	config   []byte
	manifest *v1.Manifest
	raw      []byte
}

func (c *configImage) RawConfigFile() ([]byte, error) { return c.config, nil }
func (c *configImage) ConfigFile() (*v1.ConfigFile, error) {
	return v1.ParseConfigFile(bytes.NewReader(c.config))
}
func (c *configImage) ConfigName() (v1.Hash, error)        { return c.manifest.Config.Digest, nil }
func (c *configImage) Manifest() (*v1.Manifest, error)     { return c.manifest.DeepCopy(), nil }
func (c *configImage) RawManifest() ([]byte, error)        { return c.raw, nil }
func (c *configImage) Digest() (v1.Hash, error)            { return partial.Digest(c) }
func (c *configImage) Size() (int64, error)                { return partial.Size(c) }
func (c *configImage) MediaType() (types.MediaType, error) { return c.manifest.MediaType, nil }

// LayerByDigest serves the new config by its digest, and the layers as img does.
func (c *configImage) LayerByDigest(h v1.Hash) (v1.Layer, error) {
	if h == c.manifest.Config.Digest {
		return static.NewLayer(c.config, c.manifest.Config.MediaType), nil
	}
	return c.Image.LayerByDigest(h)
}
