package image

import (
	"context"
	"fmt"
	"sort"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"

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

// WriteManifest writes one image manifest and its blobs into the layout, with an entry in
// index.json named by ref (AnnotationImageName), replacing an entry of the same ref. A referrer's
// entry (ref by digest) lets readers of the layout find it from its subject (oras discover
// --oci-layout); PushLayout pushes these entries before the images they are attached to.
func (l *Layout) WriteManifest(ctx context.Context, ref string, img v1.Image) (Sent, error) {
	r, err := name.ParseReference(ref, name.Insecure)
	if err != nil {
		return Sent{}, fmt.Errorf("'%s' is not an image reference: %w", ref, err)
	}
	written, err := l.writeImage(ctx, img)
	if err != nil {
		return Sent{Bytes: written}, fmt.Errorf("write %s into the OCI layout %s: %w", ref, l.dir, err)
	}
	m, err := img.Manifest()
	if err != nil {
		return Sent{Bytes: written}, err
	}
	desc, err := descriptorOf(img)
	if err != nil {
		return Sent{Bytes: written}, err
	}
	desc.ArtifactType = m.ArtifactType
	desc.Annotations = map[string]string{AnnotationImageName: ref}
	if _, ok := r.(name.Tag); ok {
		desc.Annotations[AnnotationRefName] = r.Identifier()
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	entries, err := l.entries()
	if err != nil {
		return Sent{Bytes: written}, err
	}
	kept := entries[:0]
	for _, d := range entries {
		if d.Annotations[AnnotationImageName] != ref {
			kept = append(kept, d)
		}
	}
	kept = append(kept, desc)
	sort.SliceStable(kept, func(i, j int) bool {
		return kept[i].Annotations[AnnotationImageName] < kept[j].Annotations[AnnotationImageName]
	})
	return Sent{Bytes: written}, l.writeIndexJSON(kept)
}

// WriteReferrers writes each referrer as WriteManifest does, under its digest.
func (l *Layout) WriteReferrers(ctx context.Context, repository string, referrers []v1.Image) (Sent, error) {
	var sent Sent
	for _, img := range referrers {
		d, err := img.Digest()
		if err != nil {
			return sent, err
		}
		s, err := l.WriteManifest(ctx, repository+"@"+d.String(), img)
		sent.add(s)
		if err != nil {
			return sent, err
		}
	}
	return sent, nil
}

// Manifest reads the image manifest the layout holds under ref, or nil.
func (l *Layout) Manifest(_ context.Context, ref string) (v1.Image, error) {
	l.mu.Lock()
	entries, err := l.entries()
	l.mu.Unlock()
	if err != nil {
		return nil, err
	}
	for _, d := range entries {
		if d.Annotations[AnnotationImageName] == ref && d.MediaType.IsImage() {
			return l.image(d.Digest)
		}
	}
	return nil, nil
}

func (l *Layout) image(h v1.Hash) (v1.Image, error) {
	root, err := layout.ImageIndexFromPath(l.dir)
	if err != nil {
		return nil, fmt.Errorf("read the OCI layout %s: %w", l.dir, err)
	}
	img, err := root.Image(h)
	if err != nil {
		return nil, fmt.Errorf("read %s from the OCI layout %s: %w", h, l.dir, err)
	}
	return img, nil
}

// Attachments lists the layout's single manifests that name where they go: referrers and
// signatures, in the order of index.json.
func (l *Layout) Attachments() ([]LayoutEntry, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	m, err := l.entries()
	if err != nil {
		return nil, err
	}
	var out []LayoutEntry
	for _, d := range m {
		if ref := d.Annotations[AnnotationImageName]; ref != "" && d.MediaType.IsImage() {
			out = append(out, LayoutEntry{Reference: ref, Digest: d.Digest.String(), Annotations: d.Annotations,
				ArtifactType: d.ArtifactType})
		}
	}
	return out, nil
}

// attachmentKind is what a layout's attachment is, as far as its entry says: a signature (under
// a cosign signature tag) or a referrer of its ArtifactType.
func attachmentKind(e LayoutEntry) string {
	if sign.IsTag(e.Reference) {
		return "signature"
	}
	return "referrer"
}

func descriptorOf(img v1.Image) (v1.Descriptor, error) {
	mt, err := img.MediaType()
	if err != nil {
		return v1.Descriptor{}, err
	}
	digest, err := img.Digest()
	if err != nil {
		return v1.Descriptor{}, err
	}
	size, err := img.Size()
	if err != nil {
		return v1.Descriptor{}, err
	}
	return v1.Descriptor{MediaType: mt, Digest: digest, Size: size}, nil
}

// pushAttachments pushes the layout's attachments of the repositories in want, one at a time:
// a registry without the referrers API keeps a subject's referrers in one tag, read and
// rewritten for each.
func pushAttachments(ctx context.Context, l *Layout, dest Destination, want map[string]bool) error {
	attachments, err := l.Attachments()
	if err != nil {
		return err
	}
	for _, a := range attachments {
		if !want[a.Repository()] {
			continue
		}
		h, err := v1.NewHash(a.Digest)
		if err != nil {
			return err
		}
		img, err := l.image(h)
		if err != nil {
			return err
		}
		if attachmentKind(a) == "signature" {
			if img, err = WithSignaturesOf(ctx, dest, a.Reference, img); err != nil {
				return err
			}
		}
		if img == nil {
			continue
		}
		if _, err := dest.WriteManifest(ctx, a.Reference, img); err != nil {
			return err
		}
	}
	return nil
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
