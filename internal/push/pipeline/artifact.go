package pipeline

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/toa-deploy/toa-deploy/internal/artifact"
	"github.com/toa-deploy/toa-deploy/internal/fault"
	"github.com/toa-deploy/toa-deploy/internal/push/attest"
	"github.com/toa-deploy/toa-deploy/internal/push/image"
	"github.com/toa-deploy/toa-deploy/internal/push/layout"
	"github.com/toa-deploy/toa-deploy/internal/sign"
	"github.com/toa-deploy/toa-deploy/manifest"
)

// ArtifactReport is the kustomization pushed as a Flux artifact.
type ArtifactReport struct {
	Reference string `json:"reference"`           // where it was pushed: REGISTRY/REPOSITORY:TAG
	Digest    string `json:"digest"`              // its manifest's digest
	Signature string `json:"signature,omitempty"` // the cosign signature tag, when it was signed
	Pushed    bool   `json:"pushed"`              // false when the destination already had it under the tag

	// Provenance is the digest of its provenance (in-toto, SLSA v1, naming every image it pins),
	// attached as a referrer unless attestations are off (--sbom none); signed with it.
	Provenance string `json:"provenance,omitempty"`
}

// WithArtifact pushes the kustomization, once written, as an OCI artifact in Flux's format
// (artifact.New) to ref, signed with WithAttestation's signer, after the images: Flux's
// OCIRepository, or toa-apply oci://ref, reads it. With WithOCILayout it goes into the layout,
// and PushLayout pushes it. Source and revision are the annotations `flux push artifact
// --source --revision` writes.
func WithArtifact(ref, source, revision string) Option {
	return func(o *options) { o.artifact, o.artifactSource, o.artifactRevision = ref, source, revision }
}

// checkArtifactRef refuses, before any work, a reference a registry would refuse or one by
// digest: an artifact is found by its tag.
func checkArtifactRef(ref string) error {
	if ref == "" {
		return nil
	}
	r, err := name.ParseReference(ref, name.Insecure)
	if err == nil {
		if _, ok := r.(name.Digest); ok {
			err = fmt.Errorf("it names a digest; give a tag, as Flux's OCIRepository follows one")
		}
	}
	if err != nil {
		return &fault.Input{Key: "--artifact", Message: fmt.Sprintf("%q is not a reference to push to: %v", ref, err),
			Hint: "give REGISTRY/REPOSITORY:TAG, e.g. registry.internal/shop/deploy:production"}
	}
	return nil
}

// pushArtifact makes the artifact of the kustomization in dir and writes it to dest: its
// signature first, then the manifest under its tag, so that a reader that verifies never finds
// the tag on an unsigned artifact.
func (o *options) pushArtifact(ctx context.Context, dest image.Destination, dir string, created time.Time, contextName, env string) (*ArtifactReport, error) {
	files, k, err := manifest.ReadKustomization(dir)
	if err != nil {
		return nil, err
	}
	img, err := artifact.New(files, artifact.Metadata{Source: o.source(contextName), Revision: o.revision(env), Created: created})
	if err != nil {
		return nil, fmt.Errorf("make the artifact of %s: %w", dir, err)
	}
	digest, err := img.Digest()
	if err != nil {
		return nil, err
	}
	report := &ArtifactReport{Reference: o.artifact, Digest: digest.String()}
	ref, err := name.ParseReference(o.artifact, name.Insecure)
	if err != nil {
		return nil, err
	}
	if o.sbom != attest.None {
		build := &attest.ArtifactBuild{Reference: o.artifact, Digest: digest.String(), Context: contextName, Environment: env}
		for _, img := range k.Images {
			build.Images = append(build.Images, attest.PinnedImage{Repository: img.Name, Digest: img.Digest})
		}
		if report.Provenance, err = attachProvenance(ctx, dest, build, ref.Context(), img, created); err != nil {
			return nil, err
		}
	}
	if o.signer != nil {
		if report.Signature, err = signArtifact(ctx, dest, o.signer, ref.Context(), digest); err != nil {
			return nil, err
		}
		if report.Provenance != "" {
			h, err := v1.NewHash(report.Provenance)
			if err != nil {
				return nil, err
			}
			if _, err := signArtifact(ctx, dest, o.signer, ref.Context(), h); err != nil {
				return nil, err
			}
		}
	}
	have, err := dest.Manifest(ctx, o.artifact)
	if err != nil {
		return nil, err
	}
	if have != nil {
		if d, err := have.Digest(); err == nil && d == digest {
			return report, nil
		}
	}
	o.events(image.Event{Image: "artifact", Message: "pushing " + o.artifact})
	if _, err := dest.WriteManifest(ctx, o.artifact, img); err != nil {
		return nil, fmt.Errorf("push the kustomization as the artifact %s: %w", o.artifact, err)
	}
	report.Pushed = true
	o.log.Debugf("pushed the kustomization as %s@%s", o.artifact, digest)
	return report, nil
}

// source and revision default to the context and the environment: what a reader of `flux get
// sources oci` needs to know where it came from, when CI names no commit.
func (o *options) source(contextName string) string {
	if o.artifactSource != "" {
		return o.artifactSource
	}
	return "toa:" + contextName
}

func (o *options) revision(env string) string {
	if o.artifactRevision != "" {
		return o.artifactRevision
	}
	return env
}

// attachProvenance writes the artifact's provenance as a referrer of it (its subject), and
// returns the referrer's digest.
func attachProvenance(ctx context.Context, dest image.Destination, build *attest.ArtifactBuild, repo name.Repository, subject v1.Image, created time.Time) (string, error) {
	doc, err := build.Provenance(attest.ToaPush())
	if err != nil {
		return "", err
	}
	size, err := subject.Size()
	if err != nil {
		return "", err
	}
	desc := v1.Descriptor{MediaType: types.OCIManifestSchema1, Size: size, Digest: v1.Hash{}}
	if desc.Digest, err = subject.Digest(); err != nil {
		return "", err
	}
	ref, err := attest.Artifact(doc, attest.MediaTypeInToto, attest.MediaTypeInToto, attest.ProvenanceFile, desc,
		map[string]string{attest.AnnotationCreated: created.UTC().Format(time.RFC3339), attest.AnnotationPredicateType: attest.PredicateSLSAProvenance})
	if err != nil {
		return "", err
	}
	d, err := ref.Digest()
	if err != nil {
		return "", err
	}
	if _, err := dest.WriteManifest(ctx, repo.Digest(d.String()).String(), ref); err != nil {
		return "", fmt.Errorf("attach the provenance of the artifact %s@%s: %w", repo.Name(), desc.Digest, err)
	}
	return d.String(), nil
}

// signArtifact adds signer's signature of digest under its cosign signature tag in repo,
// unless it is there, and returns the tag.
func signArtifact(ctx context.Context, dest image.Destination, signer *sign.Signer, repo name.Repository, digest v1.Hash) (string, error) {
	signature, _, err := image.Sign(ctx, dest, signer, repo.Name(), digest.String())
	if err != nil {
		return "", fmt.Errorf("sign the artifact: %w", err)
	}
	return signature.Reference, nil
}

// pushLayoutArtifact pushes the artifact a layout holds, if any, after its images: what is
// attached to it first (its provenance, and its signatures added to those the registry has),
// then the manifest under its tag.
func (o *options) pushLayoutArtifact(ctx context.Context, l *layout.Layout) (*ArtifactReport, error) {
	entries, err := l.Attachments()
	if err != nil {
		return nil, err
	}
	var found *layout.Entry
	var img v1.Image
	for i, e := range entries {
		m, err := l.Manifest(ctx, e.Reference)
		if err != nil {
			return nil, err
		}
		if m != nil && artifact.IsFlux(m) {
			found, img = &entries[i], m
		}
	}
	if found == nil {
		return nil, nil
	}
	dest := image.NewRegistryDestination(o.registries)
	report := &ArtifactReport{Reference: found.Reference, Digest: found.Digest}
	for _, e := range entries {
		if e.Repository() != found.Repository() || e.Reference == found.Reference {
			continue
		}
		m, err := l.Manifest(ctx, e.Reference)
		if err != nil || m == nil {
			return nil, err
		}
		if sign.IsTag(e.Reference) {
			if err := pushSignatures(ctx, dest, e.Reference, m); err != nil {
				return nil, err
			}
			if strings.HasSuffix(e.Reference, ":"+sign.TagName(found.Digest)) {
				report.Signature = e.Reference
			}
			continue
		}
		if _, err := dest.WriteManifest(ctx, e.Reference, m); err != nil {
			return nil, fmt.Errorf("push %s from the layout: %w", e.Reference, err)
		}
		if e.ArtifactType == attest.MediaTypeInToto {
			report.Provenance = e.Digest
		}
	}
	if have, err := dest.Digest(ctx, found.Reference); err != nil {
		return nil, err
	} else if have == found.Digest {
		return report, nil
	}
	o.events(image.Event{Image: "artifact", Message: "pushing " + found.Reference})
	if _, err := dest.WriteManifest(ctx, found.Reference, img); err != nil {
		return nil, fmt.Errorf("push the artifact %s from the layout: %w", found.Reference, err)
	}
	report.Pushed = true
	return report, nil
}

// pushSignatures writes the layout's signature image under tag, keeping the signatures the
// registry already has there (image.WithSignaturesOf, as for the images' signatures).
func pushSignatures(ctx context.Context, dest image.Destination, tag string, sigs v1.Image) error {
	sigs, err := image.WithSignaturesOf(ctx, dest, tag, sigs)
	if err != nil || sigs == nil {
		return err
	}
	if _, err := dest.WriteManifest(ctx, tag, sigs); err != nil {
		return fmt.Errorf("push the artifact's signatures %s: %w", tag, err)
	}
	return nil
}
