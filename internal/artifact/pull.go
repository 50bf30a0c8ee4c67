package artifact

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/toa-deploy/toa-deploy/internal/fault"
	"github.com/toa-deploy/toa-deploy/internal/registry"
)

// Scheme opens an artifact's reference on toa-apply's command line, as Flux writes it.
const Scheme = "oci://"

// Limits bound what a pull reads and writes.
type Limits struct {
	Manifest int64 // bytes of the manifest
	Layer    int64 // bytes of the compressed layer
	Unpacked int64 // bytes of all files unpacked
	Files    int   // entries of the tar
}

// DefaultLimits fit any kustomization toa-push writes with room to spare: its files are YAML.
var DefaultLimits = Limits{Manifest: 4 << 20, Layer: 64 << 20, Unpacked: 256 << 20, Files: 10000}

// Registry is how toa-apply reaches registries: registry's client, as toa-push's, so that a pull
// has its credentials (Docker's config and credential helpers), its plain HTTP rule (loopback, or
// --insecure), its --ca-file read (a regular file, bounded), its stall timeout and retries, and its
// bounds on what a registry sends (redirects, never HTTPS to plain HTTP, manifests of at most
// 4 MiB, blobs checked against their digests). Its errors are registry.Errors.
type Registry struct {
	reg *registry.Registries
}

// NewRegistry builds toa-apply's registry access of one run: registry.NewRegistries with opts
// (registry.WithInsecure, WithCAFile; WithKeychain in tests), named toa-apply in its requests and
// its words.
func NewRegistry(opts ...registry.RegistryOption) (Registry, error) {
	reg, err := registry.NewRegistries(append([]registry.RegistryOption{registry.WithProgram("toa-apply")}, opts...)...)
	if err != nil {
		return Registry{}, err
	}
	return Registry{reg: reg}, nil
}

// ParseReference reads REF[@DIGEST], with or without oci://. A reference by digest is what is
// pulled, and verified against; a tag alone is resolved when pulled.
func (r Registry) ParseReference(s string) (name.Reference, error) {
	s = strings.TrimPrefix(s, Scheme)
	ref, err := r.reg.Reference(s)
	if err != nil {
		return nil, &fault.Input{Message: fmt.Sprintf("%q is not an artifact's reference: %v", s, errors.Unwrap(err)),
			Hint: "give oci://REGISTRY/REPOSITORY:TAG, optionally @sha256:DIGEST, as toa-push --artifact wrote it"}
	}
	return ref, nil
}

// Pulled is an artifact read from a registry: its reference by digest, its annotations, and
// its layer's bytes (checked against their digest).
type Pulled struct {
	Reference   name.Digest
	Annotations map[string]string
	Content     []byte // the tar+gzip
}

// Pull reads the artifact ref names: its manifest (at most limits.Manifest bytes, its digest the
// one ref gives, if any), which must be Flux's, and its one layer (at most limits.Layer bytes,
// checked against its digest). Nothing is written.
func (r Registry) Pull(ctx context.Context, ref name.Reference, limits Limits) (*Pulled, error) {
	desc, err := r.reg.Get(ctx, ref) // read within registry.MaxManifestSize, whatever the registry says
	if err != nil {
		return nil, registry.Wrap("the artifact "+ref.String(), "", err)
	}
	if int64(len(desc.Manifest)) > limits.Manifest {
		return nil, fmt.Errorf("the artifact %s: its manifest is %d bytes, more than the %d an artifact's may be", ref, len(desc.Manifest), limits.Manifest)
	}
	digest := v1.Hash{Algorithm: "sha256", Hex: sha256Hex(desc.Manifest)}
	if d, ok := ref.(name.Digest); ok && d.DigestStr() != digest.String() {
		return nil, fmt.Errorf("the artifact %s: the registry sent a manifest of digest %s", ref, digest)
	}
	var m v1.Manifest
	if err := json.Unmarshal(desc.Manifest, &m); err != nil {
		return nil, fmt.Errorf("the artifact %s: its manifest: %w", ref, err)
	}
	if err := isFluxManifest(desc.MediaType, &m); err != nil {
		return nil, fmt.Errorf("%s is not a Flux artifact: %w; give the reference toa-push --artifact (or flux push artifact) wrote", ref, err)
	}
	layer := m.Layers[0]
	if layer.Size > limits.Layer {
		return nil, fmt.Errorf("the artifact %s: its layer is %d bytes, more than the %d an artifact's may be", ref, layer.Size, limits.Layer)
	}
	content, err := r.blob(ctx, ref.Context().Digest(layer.Digest.String()), layer, "the artifact's layer")
	if err != nil {
		return nil, err
	}
	return &Pulled{Reference: ref.Context().Digest(digest.String()), Annotations: m.Annotations, Content: content}, nil
}

// isFluxManifest checks what makes a manifest Flux's: an OCI (or Docker) image manifest with
// Flux's config and one layer of Flux's tar+gzip.
func isFluxManifest(mt types.MediaType, m *v1.Manifest) error {
	switch {
	case mt != types.OCIManifestSchema1 && mt != types.DockerManifestSchema2:
		return fmt.Errorf("it is a %s, not an image manifest", mt)
	case m.Config.MediaType != MediaTypeConfig:
		return fmt.Errorf("its config is a %s, not %s", m.Config.MediaType, MediaTypeConfig)
	case len(m.Layers) != 1:
		return fmt.Errorf("it has %d layers, not one", len(m.Layers))
	case m.Layers[0].MediaType != MediaTypeContent:
		return fmt.Errorf("its layer is a %s, not %s", m.Layers[0].MediaType, MediaTypeContent)
	}
	return nil
}

// blob reads a blob whole, at most its size, and checks its digest. what names it in errors.
func (r Registry) blob(ctx context.Context, ref name.Digest, desc v1.Descriptor, what string) ([]byte, error) {
	l, err := r.reg.Layer(ctx, ref)
	if err != nil {
		return nil, registry.Wrap(what+" "+ref.String(), "", err)
	}
	rc, err := l.Compressed()
	if err != nil {
		return nil, registry.Wrap(what+" "+ref.String(), "", err)
	}
	defer rc.Close()
	var buf bytes.Buffer
	n, err := io.Copy(&buf, io.LimitReader(rc, desc.Size+1))
	if err != nil {
		return nil, registry.Wrap(what+" "+ref.String(), "", err)
	}
	if n != desc.Size || sha256Hex(buf.Bytes()) != desc.Digest.Hex {
		return nil, fmt.Errorf("%s %s: the registry sent %d bytes of digest sha256:%s, the manifest says %d bytes", what, ref, n, sha256Hex(buf.Bytes()), desc.Size)
	}
	return buf.Bytes(), nil
}

func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}
