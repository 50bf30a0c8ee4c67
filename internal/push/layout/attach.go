package layout

import (
	"context"
	"fmt"
	"sort"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	ggcrlayout "github.com/google/go-containerregistry/pkg/v1/layout"

	"github.com/toa-deploy/toa-deploy/internal/push/image"
	"github.com/toa-deploy/toa-deploy/internal/sign"
)

// WriteManifest writes one image manifest and its blobs into the layout, with an entry in
// index.json named by ref (AnnotationImageName), replacing an entry of the same ref. A referrer's
// entry (ref by digest) lets readers of the layout find it from its subject (oras discover
// --oci-layout); Push pushes these entries before the images they are attached to.
func (l *Layout) WriteManifest(ctx context.Context, ref string, img v1.Image) (image.Sent, error) {
	r, err := name.ParseReference(ref, name.Insecure)
	if err != nil {
		return image.Sent{}, fmt.Errorf("'%s' is not an image reference: %w", ref, err)
	}
	written, err := l.writeImage(ctx, img)
	if err != nil {
		return image.Sent{Bytes: written}, fmt.Errorf("write %s into the OCI layout %s: %w", ref, l.dir, err)
	}
	m, err := img.Manifest()
	if err != nil {
		return image.Sent{Bytes: written}, err
	}
	desc, err := descriptorOf(img)
	if err != nil {
		return image.Sent{Bytes: written}, err
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
		return image.Sent{Bytes: written}, err
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
	return image.Sent{Bytes: written}, l.writeIndexJSON(kept)
}

// WriteReferrers writes each referrer as WriteManifest does, under its digest.
func (l *Layout) WriteReferrers(ctx context.Context, repository string, referrers []v1.Image) (image.Sent, error) {
	var sent image.Sent
	for _, img := range referrers {
		d, err := img.Digest()
		if err != nil {
			return sent, err
		}
		s, err := l.WriteManifest(ctx, repository+"@"+d.String(), img)
		sent.Bytes, sent.Requests = sent.Bytes+s.Bytes, sent.Requests+s.Requests
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
	root, err := ggcrlayout.ImageIndexFromPath(l.dir)
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
func (l *Layout) Attachments() ([]Entry, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	m, err := l.entries()
	if err != nil {
		return nil, err
	}
	var out []Entry
	for _, d := range m {
		if ref := d.Annotations[AnnotationImageName]; ref != "" && d.MediaType.IsImage() {
			out = append(out, Entry{Reference: ref, Digest: d.Digest.String(), Annotations: d.Annotations,
				ArtifactType: d.ArtifactType})
		}
	}
	return out, nil
}

// attachmentKind is what a layout's attachment is, as far as its entry says: a signature (under
// a cosign signature tag) or a referrer of its ArtifactType.
func attachmentKind(e Entry) string {
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
func pushAttachments(ctx context.Context, l *Layout, dest image.Destination, want map[string]bool) error {
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
			if img, err = image.WithSignaturesOf(ctx, dest, a.Reference, img); err != nil {
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
