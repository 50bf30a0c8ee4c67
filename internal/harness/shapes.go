package harness

// The shapes a base image takes in the registries users have, each made of the test bases'
// content (bases.go): what `docker buildx` writes with and without oci-mediatypes, what older
// Docker and most private registries serve, Alpine's musl, zstd layers.

import (
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/compression"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// BaseShape is a form a base image takes in a registry. Each is pushed by PushBase under the
// tag of its name.
type BaseShape string

const (
	// OCIIndex is an OCI index of OCI manifests, linux/amd64 and linux/arm64/v8: the test base
	// (PushTestBase), and what buildx writes with oci-mediatypes=true.
	OCIIndex BaseShape = "oci-index"
	// OCIIndexOfDocker is an OCI index of Docker v2 manifests.
	OCIIndexOfDocker BaseShape = "oci-index-of-docker"
	// DockerList is a Docker manifest list of Docker v2 manifests: what buildx writes by default.
	DockerList BaseShape = "docker-list"
	// OCIImage is the amd64 base alone, an OCI manifest with no index.
	OCIImage BaseShape = "oci-image"
	// DockerImage is the amd64 base alone, a Docker v2 manifest with no index: `docker push`.
	DockerImage BaseShape = "docker-image"
	// Buildx is an OCI index as buildx writes it with provenance (its default since 0.10): both
	// platforms, and for each an attestation manifest of platform unknown/unknown, annotated
	// vnd.docker.reference.type=attestation-manifest, whose layer is an in-toto SLSA provenance.
	Buildx BaseShape = "buildx"
	// Musl is an OCI index of one linux/amd64 image of a musl distribution (musl's loader, no
	// glibc), as Alpine's node images are.
	Musl BaseShape = "musl"
	// Zstd is the musl base with every layer zstd-compressed (OCI's tar+zstd): musl's loader is
	// found only by reading zstd layers.
	Zstd BaseShape = "zstd"
)

// BaseShapes are every shape, in the order the tests take them.
var BaseShapes = []BaseShape{OCIIndex, OCIIndexOfDocker, DockerList, OCIImage, DockerImage, Buildx, Musl, Zstd}

// Platforms are the platforms of a base of the shape, as registry.platforms spells them.
func (s BaseShape) Platforms() []string {
	switch s {
	case OCIIndex, OCIIndexOfDocker, DockerList, Buildx:
		return []string{"linux/amd64", "linux/arm64"}
	}
	return []string{"linux/amd64"}
}

// Libc is the C library of the shape's images.
func (s BaseShape) Libc() string {
	if s == Musl || s == Zstd {
		return "musl"
	}
	return "glibc"
}

// Docker is true for the shapes in Docker's v2 format.
func (s BaseShape) Docker() bool {
	return s == OCIIndexOfDocker || s == DockerList || s == DockerImage
}

// PushBase pushes the test base in the given shape to the registry at addr as
// <addr>/bases/node:<shape> and returns that reference.
func PushBase(t testing.TB, addr string, shape BaseShape) (ref string) {
	t.Helper()
	ref = addr + "/" + BaseRepository + ":" + string(shape)
	if err := remote.Push(baseRef(t, ref), Base(t, shape), remote.WithContext(t.Context())); err != nil {
		t.Fatalf("push the %s test base %s: %v", shape, ref, err)
	}
	return ref
}

// Base returns the test base in the given shape: an index (v1.ImageIndex) or an image (v1.Image).
// Under `go test -short` the test is skipped: every base needs this machine's node.
func Base(t testing.TB, shape BaseShape) remote.Taggable {
	t.Helper()
	b, err := baseOf(t, shape)
	if err != nil {
		t.Fatalf("make the %s test base: %v", shape, err)
	}
	return b
}

func baseOf(t testing.TB, shape BaseShape) (remote.Taggable, error) {
	amd64 := func() *content { return contentOf(t, "amd64", amd64Content) }
	arm64 := func() *content { return contentOf(t, "arm64", arm64Content) }
	musl := func() *content { return contentOf(t, "musl", muslContent) }
	switch shape {
	case OCIIndex:
		return taggable(indexOf(types.OCIImageIndex, ociFormat, amd64(), arm64()))
	case OCIIndexOfDocker:
		return taggable(indexOf(types.OCIImageIndex, dockerFormat, amd64(), arm64()))
	case DockerList:
		return taggable(indexOf(types.DockerManifestList, dockerFormat, amd64(), arm64()))
	case OCIImage:
		return taggable(ociFormat.image(amd64()))
	case DockerImage:
		return taggable(dockerFormat.image(amd64()))
	case Buildx:
		return taggable(buildxIndex(amd64(), arm64()))
	case Musl:
		return taggable(indexOf(types.OCIImageIndex, ociFormat, musl()))
	case Zstd:
		return taggable(indexOf(types.OCIImageIndex, zstdFormat, musl()))
	}
	return nil, fmt.Errorf("no test base of the shape %q", shape)
}

func taggable[T remote.Taggable](v T, err error) (remote.Taggable, error) { return v, err }

// format is how a base's manifest is written: the media types of the manifest, the config and
// the layers, and the layers' compression.
type format struct {
	manifest, config, layer types.MediaType
	zstd                    bool
}

var (
	ociFormat    = format{manifest: types.OCIManifestSchema1, config: types.OCIConfigJSON, layer: types.OCILayer}
	dockerFormat = format{manifest: types.DockerManifestSchema2, config: types.DockerConfigJSON, layer: types.DockerLayer}
	zstdFormat   = format{manifest: types.OCIManifestSchema1, config: types.OCIConfigJSON, layer: types.OCILayerZStd, zstd: true}
)

// image makes the content an image of the format, with an official node image's config.
func (f format) image(c *content) (v1.Image, error) {
	epoch := v1.Time{Time: time.Unix(0, 0).UTC()}
	img, err := mutate.ConfigFile(empty.Image, &v1.ConfigFile{
		Architecture: c.platform.Architecture,
		Variant:      c.platform.Variant,
		OS:           c.platform.OS,
		Created:      epoch,
		RootFS:       v1.RootFS{Type: "layers"},
		Config: v1.Config{
			Env: []string{basePATH, "NODE_VERSION=" + c.nodeVersion},
			Cmd: []string{"node"},
		},
	})
	if err != nil {
		return nil, err
	}
	img = mutate.ConfigMediaType(mutate.MediaType(img, f.manifest), f.config)
	adds := make([]mutate.Addendum, len(c.layers))
	for i, l := range c.layers {
		if f.zstd {
			if l, err = zstdOf(l); err != nil {
				return nil, err
			}
		}
		adds[i] = mutate.Addendum{Layer: l, MediaType: f.layer,
			History: v1.History{Created: epoch, CreatedBy: "toa-deploy test base: " + c.comments[i]}}
	}
	return mutate.Append(img, adds...)
}

// indexOf makes an index of the given type (OCI's or Docker's list) of the contents' images.
func indexOf(list types.MediaType, f format, contents ...*content) (v1.ImageIndex, error) {
	idx := mutate.IndexMediaType(empty.Index, list)
	for _, c := range contents {
		img, err := f.image(c)
		if err != nil {
			return nil, err
		}
		p := c.platform
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &p}})
	}
	return idx, nil
}

// The zstd twins of gzip layers, by the gzip layer's digest: made once per test binary.
var zstdLayers struct {
	sync.Mutex
	of map[v1.Hash]v1.Layer
}

// zstdOf is the layer's tar compressed with zstd instead of gzip, kept in memory once made.
func zstdOf(l v1.Layer) (v1.Layer, error) {
	d, err := l.Digest()
	if err != nil {
		return nil, err
	}
	zstdLayers.Lock()
	defer zstdLayers.Unlock()
	if z := zstdLayers.of[d]; z != nil {
		return z, nil
	}
	z, err := tarball.LayerFromOpener(l.Uncompressed, tarball.WithCompression(compression.ZStd),
		tarball.WithMediaType(types.OCILayerZStd), tarball.WithCompressedCaching)
	if err != nil {
		return nil, fmt.Errorf("compress a test base layer with zstd: %w", err)
	}
	if zstdLayers.of == nil {
		zstdLayers.of = map[v1.Hash]v1.Layer{}
	}
	zstdLayers.of[d] = z
	return z, nil
}

// Annotations buildx writes on the descriptors of its attestation manifests, and in-toto's on
// their layers.
const (
	AnnotationReferenceType   = "vnd.docker.reference.type"
	AnnotationReferenceDigest = "vnd.docker.reference.digest"
	attestationManifest       = "attestation-manifest"
	inTotoPredicateType       = "in-toto.io/predicate-type"
	slsaProvenance            = "https://slsa.dev/provenance/v0.2"
	inTotoLayer               = types.MediaType("application/vnd.in-toto+json")
)

// buildxIndex is an OCI index of the contents' images, each followed by its attestation
// manifest, as buildx writes them (buildkit's exporter/containerimage/attestations.go): platform
// unknown/unknown, the descriptor annotated with the image's digest, the layer an in-toto
// statement of SLSA provenance whose subject is the image.
func buildxIndex(contents ...*content) (v1.ImageIndex, error) {
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	var attestations []mutate.IndexAddendum
	for _, c := range contents {
		img, err := ociFormat.image(c)
		if err != nil {
			return nil, err
		}
		p := c.platform
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &p}})
		att, err := attestation(img, p)
		if err != nil {
			return nil, err
		}
		digest, err := img.Digest()
		if err != nil {
			return nil, err
		}
		attestations = append(attestations, mutate.IndexAddendum{Add: att, Descriptor: v1.Descriptor{
			Platform:    &v1.Platform{OS: "unknown", Architecture: "unknown"},
			Annotations: map[string]string{AnnotationReferenceType: attestationManifest, AnnotationReferenceDigest: digest.String()},
		}})
	}
	return mutate.AppendManifests(idx, attestations...), nil
}

// attestation is buildx's attestation manifest of img: an OCI image of platform unknown/unknown
// whose one layer is an in-toto statement of SLSA provenance about img.
func attestation(img v1.Image, p v1.Platform) (v1.Image, error) {
	digest, err := img.Digest()
	if err != nil {
		return nil, err
	}
	statement, err := json.Marshal(map[string]any{
		"_type":         "https://in-toto.io/Statement/v0.1",
		"predicateType": slsaProvenance,
		"subject": []map[string]any{{
			"name":   "pkg:docker/bases/node@test?platform=" + p.OS + "%2F" + p.Architecture,
			"digest": map[string]string{"sha256": digest.Hex},
		}},
		"predicate": map[string]any{
			"builder":   map[string]string{"id": ""},
			"buildType": "https://mobyproject.org/buildkit@v1",
			"metadata":  map[string]any{"buildInvocationID": "toa-deploy-test-base", "completeness": map[string]bool{"parameters": true}},
		},
	})
	if err != nil {
		return nil, err
	}
	att, err := mutate.ConfigFile(empty.Image, &v1.ConfigFile{OS: "unknown", Architecture: "unknown", RootFS: v1.RootFS{Type: "layers"}})
	if err != nil {
		return nil, err
	}
	att = mutate.ConfigMediaType(mutate.MediaType(att, types.OCIManifestSchema1), types.OCIConfigJSON)
	return mutate.Append(att, mutate.Addendum{
		Layer:       static.NewLayer(statement, inTotoLayer),
		Annotations: map[string]string{inTotoPredicateType: slsaProvenance},
	})
}
