package attest

import (
	"bytes"
	"encoding/json"
	"fmt"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/toa-deploy/toa-deploy/internal/registry"
)

// emptyConfig is the config of an artifact manifest (OCI image spec 1.1, manifest.md, "Guidance
// for an Empty Descriptor").
var emptyConfig = []byte("{}")

// AnnotationTitle names a layer's file, which `oras pull` writes it to.
const AnnotationTitle = "org.opencontainers.image.title"

// Artifact is an OCI artifact manifest that refers to subject: the document as its one layer of
// mediaType, titled as the file `oras pull` writes, artifactType naming what it is, the empty
// config. It is an OCI image manifest (not the withdrawn artifact manifest), so registries
// without OCI 1.1 store it as any image.
func Artifact(doc []byte, mediaType, artifactType, title string, subject v1.Descriptor, annotations map[string]string) (v1.Image, error) {
	return artifactOf(doc, mediaType, artifactType, title, subject, annotations, false)
}

// artifactOf is Artifact; a fresh document (one that names its subject's digest, such as an
// image's provenance) is marked registry.Fresh, so that a registry is not asked for it first.
func artifactOf(doc []byte, mediaType, artifactType, title string, subject v1.Descriptor, annotations map[string]string, fresh bool) (v1.Image, error) {
	docDigest, docSize, err := v1.SHA256(bytes.NewReader(doc))
	if err != nil {
		return nil, err
	}
	cfgDigest, cfgSize, err := v1.SHA256(bytes.NewReader(emptyConfig))
	if err != nil {
		return nil, err
	}
	// only what a referrer's descriptor needs of its subject
	subject = v1.Descriptor{MediaType: subject.MediaType, Size: subject.Size, Digest: subject.Digest}
	m := v1.Manifest{
		SchemaVersion: 2,
		MediaType:     types.OCIManifestSchema1,
		ArtifactType:  artifactType,
		Config:        v1.Descriptor{MediaType: MediaTypeEmpty, Size: cfgSize, Digest: cfgDigest, Data: emptyConfig},
		Layers: []v1.Descriptor{{MediaType: types.MediaType(mediaType), Size: docSize, Digest: docDigest,
			Annotations: map[string]string{AnnotationTitle: title}}},
		Subject:     &subject,
		Annotations: annotations,
	}
	raw, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	docLayer := static.NewLayer(doc, types.MediaType(mediaType))
	if fresh {
		docLayer = registry.Fresh(docLayer)
	}
	a := &artifact{manifest: raw, blobs: map[v1.Hash]v1.Layer{
		docDigest: docLayer,
		cfgDigest: static.NewLayer(emptyConfig, MediaTypeEmpty),
	}}
	img, err := partial.CompressedToImage(a)
	if err != nil {
		return nil, err
	}
	return &artifactImage{Image: img, doc: docLayer}, nil
}

// artifactImage is an artifact whose document is the layer it was made with, as it was made:
// partial.CompressedToImage wraps each layer in its own type, which would hide registry.Fresh.
type artifactImage struct {
	v1.Image
	doc v1.Layer
}

func (a *artifactImage) Layers() ([]v1.Layer, error) { return []v1.Layer{a.doc}, nil }

func (a *artifactImage) LayerByDigest(h v1.Hash) (v1.Layer, error) {
	if d, err := a.doc.Digest(); err == nil && d == h {
		return a.doc, nil
	}
	return a.Image.LayerByDigest(h)
}

type artifact struct {
	manifest []byte
	blobs    map[v1.Hash]v1.Layer
}

func (a *artifact) RawConfigFile() ([]byte, error)      { return emptyConfig, nil }
func (a *artifact) MediaType() (types.MediaType, error) { return types.OCIManifestSchema1, nil }
func (a *artifact) RawManifest() ([]byte, error)        { return a.manifest, nil }
func (a *artifact) LayerByDigest(h v1.Hash) (partial.CompressedLayer, error) {
	if l, ok := a.blobs[h]; ok {
		return l, nil
	}
	return nil, fmt.Errorf("the artifact has no blob %s", h)
}

// Document reads the one document of an artifact manifest: its bytes and media type.
func Document(img v1.Image) ([]byte, string, error) {
	m, err := img.Manifest()
	if err != nil {
		return nil, "", err
	}
	if len(m.Layers) != 1 {
		return nil, "", fmt.Errorf("an attestation holds one document, this manifest holds %d", len(m.Layers))
	}
	l, err := img.LayerByDigest(m.Layers[0].Digest)
	if err != nil {
		return nil, "", err
	}
	rc, err := l.Compressed()
	if err != nil {
		return nil, "", err
	}
	defer rc.Close()
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(rc); err != nil {
		return nil, "", err
	}
	return buf.Bytes(), string(m.Layers[0].MediaType), nil
}
