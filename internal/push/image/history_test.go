package image

import (
	"bytes"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
)

// The history entries of toa-push's layers lose their time, the base's keep theirs, and the
// image is whole: its manifest names the new config, which it serves.
func TestWithoutLayerTimes(t *testing.T) {
	base, err := random.Image(64, 1)
	if err != nil {
		t.Fatal(err)
	}
	baseTime := v1.Time{Time: time.Date(2024, 5, 1, 0, 0, 0, 0, time.UTC)}
	cfg, _ := base.ConfigFile()
	cfg = cfg.DeepCopy()
	cfg.History = []v1.History{{Created: baseTime, CreatedBy: "the base's layer"}}
	if base, err = mutate.ConfigFile(base, cfg); err != nil {
		t.Fatal(err)
	}
	for _, created := range []v1.Time{{Time: time.Unix(0, 0).UTC()}, {Time: time.Unix(1700000000, 0).UTC()}} {
		l1, _ := random.Layer(64, "")
		l2, _ := random.Layer(64, "")
		img, err := mutate.Append(base, addendum(l1, "node_modules of a", created), addendum(l2, "sources", created))
		if err != nil {
			t.Fatal(err)
		}
		if img, err = mutate.CreatedAt(img, created); err != nil {
			t.Fatal(err)
		}
		before, _ := img.RawConfigFile()
		img = mutate.Annotations(img, map[string]string{"a": "b"}).(v1.Image) // writes the config again
		out, err := withoutLayerTimes(img)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := out.RawConfigFile()
		if !bytes.Contains(raw, []byte(`{"created_by":"toa-push: node_modules of a"},{"created_by":"toa-push: sources"}`)) ||
			!bytes.Contains(raw, []byte(`{"created":"2024-05-01T00:00:00Z","created_by":"the base's layer"}`)) {
			t.Errorf("config %s", raw)
		}
		if saved := len(before) - len(raw); saved != 2*len(`"created":"1970-01-01T00:00:00Z",`) {
			t.Errorf("%d bytes saved, want two times", saved)
		}
		m, _ := out.Manifest()
		name, _ := out.ConfigName()
		if d, size, _ := v1.SHA256(bytes.NewReader(raw)); m.Config.Digest != d || m.Config.Size != size || name != d {
			t.Errorf("the manifest names config %s (%d bytes), its bytes are %s (%d)", m.Config.Digest, m.Config.Size, d, size)
		}
		if l, err := out.LayerByDigest(m.Config.Digest); err != nil {
			t.Errorf("the image does not serve its config: %v", err)
		} else if d, _ := l.Digest(); d != m.Config.Digest {
			t.Errorf("the image serves config %s for %s", d, m.Config.Digest)
		}
		got, _ := out.ConfigFile()
		if !got.Created.Equal(created.Time) || len(got.History) != 3 || !strings.HasPrefix(got.History[2].CreatedBy, historyPrefix) {
			t.Errorf("config %+v", got)
		}
		// the sources over a dependencies image read back: the zero times mutate writes go too
		again, err := mutate.Append(out, addendum(l2, "sources", created))
		if err != nil {
			t.Fatal(err)
		}
		if again, err = withoutLayerTimes(again); err != nil {
			t.Fatal(err)
		}
		if raw, _ := again.RawConfigFile(); bytes.Contains(raw, []byte(`"0001-01-01`)) || bytes.Count(raw, []byte(`"created":`)) != 2 {
			t.Errorf("config %s", raw)
		}
	}
}
