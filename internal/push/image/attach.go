package image

import (
	"context"
	"fmt"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/toa-deploy/toa-deploy/internal/registry"
	"github.com/toa-deploy/toa-deploy/internal/sign"
)

// Built is an image Push has just built, before its tag is written: what an Attacher describes.
type Built struct {
	Image     *Image // as planned: a copy, so that an Attacher cannot change the plan
	Index     v1.ImageIndex
	Platforms []BuiltPlatform // in the index's order
}

// DepsReference is the image's dependencies image by tag (Image.DepsReference), or "" for an
// image built without one (an extension service's).
func (b *Built) DepsReference() string {
	if len(b.Platforms) == 0 || b.Platforms[0].Dependencies == nil {
		return ""
	}
	return b.Image.DepsReference()
}

// BuiltPlatform is one platform's image of a Built.
type BuiltPlatform struct {
	Platform   string // "linux/arm64"
	Image      v1.Image
	BaseDigest string // the base's manifest for the platform
	// Dependencies is the platform's dependencies image the image is built on (its layers are
	// the image's first), or nil when it has none of its own.
	Dependencies v1.Image
}

// BaseReference is the base as the context names it.
func (b *Built) BaseReference() string { return b.Image.Base }

// Attachment is a manifest attached to an image: an SBOM or provenance (a referrer, whose subject
// is the image or one platform's image), or a signature (cosign's, under a tag named by the
// signed digest).
type Attachment struct {
	Kind      string `json:"kind"`               // "sbom", "provenance", "signature"
	Platform  string `json:"platform,omitempty"` // of the subject, when it is one platform's image
	Subject   string `json:"subject,omitempty"`  // the digest it describes or signs
	Digest    string `json:"digest"`             // its own manifest's digest
	MediaType string `json:"mediaType,omitempty"`
	Reference string `json:"reference,omitempty"` // the tag it is under, for a signature
}

// Attacher attaches documents to an image Push has built, through dest, before Push writes the
// image's tag: a failed attach leaves no tag, and a rerun builds and attaches again.
type Attacher func(ctx context.Context, dest Destination, b *Built) ([]Attachment, Sent, error)

// attach calls the Attacher of the options, if any, on an index just built.
func (b *builder) attach(ctx context.Context, img *Image, idx v1.ImageIndex, images, deps []v1.Image, targets []Target, pushed *Pushed, sent *Sent) error {
	if b.opts.Attach == nil {
		return nil
	}
	planned := img.clone()
	built := &Built{Image: &planned, Index: idx}
	for i, im := range images {
		p := Platform(&targets[i].Platform)
		bp := BuiltPlatform{Platform: p, Image: im}
		if img.base != nil {
			bp.BaseDigest = img.base.Platforms[p]
		}
		if i < len(deps) {
			bp.Dependencies = deps[i]
		}
		built.Platforms = append(built.Platforms, bp)
	}
	b.opts.Events(Event{img.Name, "attaching the SBOM, provenance and signatures"})
	attached, s, err := b.opts.Attach(ctx, b.opts.Destination, built)
	sent.add(s)
	if err != nil {
		return fmt.Errorf("%s: attach: %w", img.Name, err)
	}
	pushed.Attachments = attached
	return nil
}

// WriteManifest pushes one image manifest and its blobs under ref: a referrer by its digest (on
// a registry without the referrers API, go-containerregistry keeps the subject's referrers tag,
// sha256-<hex>, up to date), or a signature image under its tag.
func (d *RegistryDestination) WriteManifest(ctx context.Context, ref string, img v1.Image) (Sent, error) {
	r, err := d.reg.Reference(ref)
	if err != nil {
		return Sent{}, err
	}
	counted := d.reg.Counted()
	err = counted.WriteImage(ctx, r, img)
	bytes, requests := counted.Sent()
	if err != nil {
		return Sent{bytes, requests}, registry.Wrap("push "+ref, "", err)
	}
	return Sent{bytes, requests}, nil
}

// WriteReferrers pushes the referrers of one subject and their blobs (registry.WriteReferrers):
// on a registry without the referrers API, the subject's referrers tag is read and written once
// for them all.
func (d *RegistryDestination) WriteReferrers(ctx context.Context, repository string, referrers []v1.Image) (Sent, error) {
	r, err := d.reg.Reference(repository)
	if err != nil {
		return Sent{}, err
	}
	counted := d.reg.Counted()
	err = counted.WriteReferrers(ctx, r.Context(), referrers)
	bytes, requests := counted.Sent()
	if err != nil {
		return Sent{bytes, requests}, registry.Wrap("push the referrers of an image of "+repository, "", err)
	}
	return Sent{bytes, requests}, nil
}

// Manifest reads the image manifest under ref, or nil when the registry has none.
func (d *RegistryDestination) Manifest(ctx context.Context, ref string) (v1.Image, error) {
	r, err := d.reg.Reference(ref)
	if err != nil {
		return nil, err
	}
	img, err := d.reg.Image(ctx, r)
	if notFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, registry.Wrap(ref, "to read what is attached to an image", err)
	}
	return img, nil
}

// WithSignaturesOf keeps the signatures the destination already has under a signature tag: the
// layout's are added to the destination's (sign.Merge) rather than put in their place. It
// returns nil when the destination holds them all.
func WithSignaturesOf(ctx context.Context, dest Destination, ref string, img v1.Image) (v1.Image, error) {
	have, err := dest.Manifest(ctx, ref)
	if err != nil || have == nil {
		return img, err
	}
	return sign.Merge(have, img)
}

// Sign adds signer's signature of digest in repository to dest, under its cosign signature tag,
// unless it is there already; the attachment is the signature image the tag then holds.
func Sign(ctx context.Context, dest Destination, signer *sign.Signer, repository, digest string) (Attachment, Sent, error) {
	repo, err := name.NewRepository(repository, name.Insecure)
	if err != nil {
		return Attachment{}, Sent{}, err
	}
	tag := sign.Tag(repo, digest).String()
	existing, err := dest.Manifest(ctx, tag)
	if err != nil {
		return Attachment{}, Sent{}, err
	}
	sigs, err := signer.Image(existing, repository, digest)
	if err != nil {
		return Attachment{}, Sent{}, err
	}
	var sent Sent
	if sigs == nil {
		sigs = existing
	} else if sent, err = dest.WriteManifest(ctx, tag, sigs); err != nil {
		return Attachment{}, sent, fmt.Errorf("sign %s@%s: %w", repository, digest, err)
	}
	d, err := sigs.Digest()
	if err != nil {
		return Attachment{}, sent, err
	}
	return Attachment{Kind: "signature", Subject: digest, Digest: d.String(), MediaType: sign.MediaTypeSimpleSigning, Reference: tag}, sent, nil
}
