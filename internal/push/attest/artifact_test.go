package attest

import (
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

func TestArtifact(t *testing.T) {
	subject := v1.Descriptor{MediaType: types.OCIManifestSchema1, Size: 42, Digest: v1.Hash{Algorithm: "sha256", Hex: strings.Repeat("ab", 32)},
		Platform: &v1.Platform{OS: "linux", Architecture: "amd64"}}
	art, err := Artifact([]byte(`{"spdxVersion":"SPDX-2.3"}`), MediaTypeSPDX, MediaTypeSPDX, "sbom.spdx.json", subject, map[string]string{AnnotationCreated: "1970-01-01T00:00:00Z"})
	if err != nil {
		t.Fatal(err)
	}
	m, err := art.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	if m.ArtifactType != MediaTypeSPDX || m.Subject == nil || m.Subject.Digest != subject.Digest || m.Subject.Platform != nil {
		t.Errorf("manifest %+v", m)
	}
	// the empty descriptor of the image spec
	if m.Config.MediaType != MediaTypeEmpty || m.Config.Digest.String() != "sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a" || m.Config.Size != 2 {
		t.Errorf("config %+v", m.Config)
	}
	doc, mt, err := Document(art)
	if err != nil || mt != MediaTypeSPDX || string(doc) != `{"spdxVersion":"SPDX-2.3"}` {
		t.Errorf("document %s %s %v", doc, mt, err)
	}
	layers, err := art.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("layers %v %v", layers, err)
	}
	cfg, err := art.RawConfigFile()
	if err != nil || string(cfg) != "{}" {
		t.Errorf("config %s %v", cfg, err)
	}
}
