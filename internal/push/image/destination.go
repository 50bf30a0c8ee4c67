package image

import (
	"context"
	"errors"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"

	"github.com/toa-deploy/toa-deploy/internal/registry"
)

// Destination is where a push puts the application's images: the registry each image's
// reference names (NewRegistryDestination), or an OCI image layout on disk (layout.Open). Probe
// and Push ask it these questions and nothing else, so that neither tests which one it is.
type Destination interface {
	// Digest returns the digest of the index tagged ref, or "" when the destination lacks it.
	Digest(ctx context.Context, ref string) (string, error)
	// Index returns the index tagged ref, or nil when the destination lacks it.
	Index(ctx context.Context, ref string) (v1.ImageIndex, error)
	// Write puts the index and everything it holds under ref, the tag last, so that a failed
	// write leaves no tag on an incomplete image. It returns what it sent, also on failure.
	Write(ctx context.Context, ref string, idx v1.ImageIndex) (Sent, error)
	// WriteManifest puts one image manifest and its blobs under ref (a tag or a digest): what
	// is attached to an image (attach.go).
	WriteManifest(ctx context.Context, ref string, img v1.Image) (Sent, error)
	// WriteReferrers puts image manifests that all name one manifest of the repository as their
	// subject (the documents attached to it) by their digests, with their blobs, so that they
	// are its referrers.
	WriteReferrers(ctx context.Context, repository string, referrers []v1.Image) (Sent, error)
	// Manifest returns the image manifest under ref, or nil when the destination lacks it.
	Manifest(ctx context.Context, ref string) (v1.Image, error)
}

// Sent is what a write cost: the bytes sent (to a registry) or written (to a layout), and the
// requests made.
type Sent struct {
	Bytes, Requests int64
}

func (s *Sent) add(o Sent) {
	s.Bytes += o.Bytes
	s.Requests += o.Requests
}

// RegistryDestination puts images into the registries their references name.
type RegistryDestination struct {
	reg *registry.Registries
}

// NewRegistryDestination is the registries of reg as a destination.
func NewRegistryDestination(reg *registry.Registries) *RegistryDestination {
	return &RegistryDestination{reg: reg}
}

// Digest asks with one HEAD.
func (d *RegistryDestination) Digest(ctx context.Context, ref string) (string, error) {
	r, err := d.reg.Reference(ref)
	if err != nil {
		return "", err
	}
	desc, err := d.reg.Head(ctx, r)
	if notFound(err) {
		return "", nil
	}
	if err != nil {
		return "", registry.Wrap(ref, "to ask the target registry which images it has", err)
	}
	return desc.Digest.String(), nil
}

// Index reads the index; its images and layers stay in the registry until they are read.
func (d *RegistryDestination) Index(ctx context.Context, ref string) (v1.ImageIndex, error) {
	r, err := d.reg.Reference(ref)
	if err != nil {
		return nil, err
	}
	idx, err := d.reg.Index(ctx, r)
	if notFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, registry.Wrap(ref, "to read the dependencies image from the target registry", err)
	}
	return idx, nil
}

// Write pushes what the registry lacks: blobs it holds are not sent again, blobs of another
// repository of the same registry are mounted, each blob is sent once in a run, and the tag
// goes last.
func (d *RegistryDestination) Write(ctx context.Context, ref string, idx v1.ImageIndex) (Sent, error) {
	r, err := d.reg.Reference(ref)
	if err != nil {
		return Sent{}, err
	}
	counted := d.reg.Counted()
	err = counted.WriteIndex(ctx, r, idx)
	bytes, requests := counted.Sent()
	if err != nil {
		return Sent{bytes, requests}, registry.Wrap("push "+ref, "", err)
	}
	return Sent{bytes, requests}, nil
}

// Upload puts what the index holds, its images and their blobs, by their digests; Write under
// the tag afterwards sends only the index.
func (d *RegistryDestination) Upload(ctx context.Context, repository string, idx v1.ImageIndex) (Sent, error) {
	r, err := d.reg.Reference(repository)
	if err != nil {
		return Sent{}, err
	}
	counted := d.reg.Counted()
	err = counted.WriteChildren(ctx, r.Context(), idx)
	bytes, requests := counted.Sent()
	if err != nil {
		return Sent{bytes, requests}, registry.Wrap("push the images of "+repository, "", err)
	}
	return Sent{bytes, requests}, nil
}

func notFound(err error) bool {
	var terr *transport.Error
	return errors.As(err, &terr) && terr.StatusCode == 404
}
