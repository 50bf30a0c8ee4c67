package image

// What toa-push writes is OCI, whatever the base's format: every manifest an OCI image manifest
// (application/vnd.oci.image.manifest.v1+json) with an OCI config and OCI layer types, every
// index an OCI image index. A base in Docker's v2 format (a manifest list, an OCI index of Docker
// manifests, a single Docker manifest) is converted whole when it is built on, not followed:
//
//   - One family per image, on every output. An image that mixes Docker's manifest with OCI's
//     layer types is refused by containers/image (podman, skopeo, CRI-O): "unsupported docker
//     v2s2 media type". Following the base would need a Docker twin of every layer type we
//     write, and could not write zstd (OCI only).
//   - Annotations, which Docker's v2 manifests and manifest lists do not have, are needed: the
//     mirror a base was read from is recorded in them, and an OCI image layout (--oci-layout)
//     is read by OCI tools (umoci) that take OCI manifests only.
//   - Nothing is sent again: a Docker layer (vnd.docker.image.rootfs.diff.tar.gzip) is the same
//     gzipped tar as an OCI layer (vnd.oci.image.layer.v1.tar+gzip), so the base's layers keep
//     their bytes and digests, and only the manifest that lists them is new. This is what
//     containers/image does when it converts an image to OCI (buildah's and podman's default).
//   - Reproducible: the conversion is a function of the base's manifest alone. A base that is
//     OCI already gives the digests it gave before.
//
// Every runtime and registry Kubernetes users meet reads OCI (containerd, CRI-O, Docker Engine;
// Distribution since 2.7, Harbor, Quay, the clouds' registries, GHCR, Docker Hub).

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// ociLayerTypes are the OCI types of the layer types a base may have: Docker's are the same
// bytes under another name.
var ociLayerTypes = map[types.MediaType]types.MediaType{
	types.DockerLayer:             types.OCILayer,
	types.DockerUncompressedLayer: types.OCIUncompressedLayer,
	types.OCILayer:                types.OCILayer,
	types.OCILayerZStd:            types.OCILayerZStd,
	types.OCIUncompressedLayer:    types.OCIUncompressedLayer,
}

// baseAsOCI returns a base as the first layers of a new OCI image: asOCI, without the base's own
// annotations and subject, which describe the base (its version, its sources, when it was made)
// and not the image built on it.
func baseAsOCI(img v1.Image, what string) (v1.Image, error) {
	return toOCI(img, what, false)
}

// asOCI returns the image with an OCI manifest of the OCI config type and the same layers typed
// as OCI's. Everything else, the layers included, is read from img as it was, so that a layer
// of a registry can still be mounted from it. A layer that cannot be carried (Windows' foreign
// layers, OCI's non-distributable ones) is an error that names it.
func asOCI(img v1.Image, what string) (v1.Image, error) {
	return toOCI(img, what, true)
}

func toOCI(img v1.Image, what string, keepAnnotations bool) (v1.Image, error) {
	m, err := img.Manifest()
	if err != nil {
		return nil, fmt.Errorf("read the manifest of %s: %w", what, err)
	}
	switch m.MediaType {
	case types.OCIManifestSchema1, types.DockerManifestSchema2, "":
	default:
		return nil, fmt.Errorf("%s is a %s, which toa-push does not build on: choose a base in Docker's v2 or OCI's format (copy it with `skopeo copy --format oci`)", what, m.MediaType)
	}
	out := m.DeepCopy()
	out.MediaType = types.OCIManifestSchema1
	if !keepAnnotations {
		out.Annotations, out.Subject = nil, nil
	}
	switch m.Config.MediaType {
	case types.DockerConfigJSON, types.OCIConfigJSON:
		out.Config.MediaType = types.OCIConfigJSON
	default:
		return nil, fmt.Errorf("%s is not an image: its config is a %s", what, m.Config.MediaType)
	}
	for i, l := range out.Layers {
		mt, ok := ociLayerTypes[l.MediaType]
		if !ok {
			return nil, fmt.Errorf("%s: its layer %s is a %s, which toa-push cannot carry into a Linux image pushed elsewhere: choose a base without it", what, l.Digest, l.MediaType)
		}
		out.Layers[i].MediaType = mt
	}
	raw, err := json.Marshal(out)
	if err != nil {
		return nil, err
	}
	return &ociImage{Image: img, manifest: out, raw: raw}, nil
}

// ociImage is an image with another manifest over the same config and layers.
type ociImage struct {
	v1.Image
	manifest *v1.Manifest
	raw      []byte
}

func (o *ociImage) MediaType() (types.MediaType, error) { return o.manifest.MediaType, nil }
func (o *ociImage) Manifest() (*v1.Manifest, error)     { return o.manifest.DeepCopy(), nil }
func (o *ociImage) RawManifest() ([]byte, error)        { return o.raw, nil }
func (o *ociImage) Digest() (v1.Hash, error)            { return partial.Digest(o) }
func (o *ociImage) Size() (int64, error)                { return partial.Size(o) }

// CheckOCI refuses an index that is not what toa-push writes: an OCI index of OCI image
// manifests, each with an OCI config and OCI layer types, each described in the index by its
// own media type, digest, size and the platform of its config. It reads only what the index
// holds (for a layout or a registry, the manifests and configs). Push checks what it builds
// with it, and layout.Push what it reads from a layout.
func CheckOCI(idx v1.ImageIndex) error {
	m, err := idx.IndexManifest()
	if err != nil {
		return err
	}
	if m.MediaType != types.OCIImageIndex {
		return fmt.Errorf("the index is a %s, not an OCI image index", m.MediaType)
	}
	var errs []error
	for _, d := range m.Manifests {
		if err := checkChild(idx, d); err != nil {
			errs = append(errs, fmt.Errorf("%s (%s): %w", d.Digest, Platform(d.Platform), err))
		}
	}
	return errors.Join(errs...)
}

func checkChild(idx v1.ImageIndex, d v1.Descriptor) error {
	if d.MediaType != types.OCIManifestSchema1 {
		return fmt.Errorf("listed as a %s, not an OCI image manifest", d.MediaType)
	}
	img, err := idx.Image(d.Digest)
	if err != nil {
		return err
	}
	raw, err := img.RawManifest()
	if err != nil {
		return err
	}
	if h, n, err := v1.SHA256(bytes.NewReader(raw)); err != nil || h != d.Digest || n != d.Size {
		return fmt.Errorf("the manifest is %d bytes with digest %s, the index says %d bytes", n, h, d.Size)
	}
	m, err := img.Manifest()
	if err != nil {
		return err
	}
	if m.MediaType != d.MediaType {
		return fmt.Errorf("the manifest says it is a %s, the index a %s", m.MediaType, d.MediaType)
	}
	if m.Config.MediaType != types.OCIConfigJSON {
		return fmt.Errorf("its config is a %s, not an OCI image config", m.Config.MediaType)
	}
	for _, l := range m.Layers {
		if mt, ok := ociLayerTypes[l.MediaType]; !ok || mt != l.MediaType {
			return fmt.Errorf("its layer %s is a %s, not an OCI layer", l.Digest, l.MediaType)
		}
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return err
	}
	got, want := cfg.Platform(), d.Platform
	if want == nil || got.OS != want.OS || got.Architecture != want.Architecture ||
		(got.Variant != "" && Platform(got) != Platform(want)) { // a config may leave the variant out
		return fmt.Errorf("its config says %s, the index %s", Platform(got), Platform(want))
	}
	return nil
}
