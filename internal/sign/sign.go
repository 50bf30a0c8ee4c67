// Package sign is cosign's signature format, written once: the simple-signing payload, the
// sha256-<hex>.sig tag the signatures of a digest are under, signing (Signer), verifying
// (Verify, as `cosign verify --key` checks without a transparency log) and adding signatures to
// a signature image that has others (Merge). toa-push signs images, their attachments and the
// artifact with it; toa-apply verifies the artifact and its images with it, so it imports
// nothing of the push chain: only go-containerregistry, fault and fsys. Reading and writing
// signature images is its callers' (image, artifact): this package touches no registry.
package sign

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// What cosign reads of a signature (sigstore/cosign v3: pkg/oci/static/signature.go,
// pkg/types/media.go, pkg/oci/remote/remote.go; the payload is sigstore/sigstore's
// pkg/signature/payload): the signatures of a manifest digest are the layers of the image tagged
// sha256-<hex>.sig in the same repository, each a simple-signing payload with its base64
// signature in an annotation.
const (
	MediaTypeSimpleSigning = "application/vnd.dev.cosign.simplesigning.v1+json"
	AnnotationSignature    = "dev.cosignproject.cosign/signature"
	// cosignSignatureType is the payload's critical.type.
	cosignSignatureType = "cosign container image signature"
	// tagSuffix ends every signature tag.
	tagSuffix = ".sig"
)

// The most Verify reads of a signature image: a payload is a few hundred bytes, and a digest
// has a signature per signer.
const (
	maxPayload    = 64 << 10
	maxSignatures = 100
)

// simpleSigning is cosign's payload (sigstore/sigstore pkg/signature/payload
// SimpleContainerImage), its fields in cosign's order.
type simpleSigning struct {
	Critical struct {
		Identity struct {
			DockerReference string `json:"docker-reference"`
		} `json:"identity"`
		Image struct {
			DockerManifestDigest string `json:"docker-manifest-digest"`
		} `json:"image"`
		Type string `json:"type"`
	} `json:"critical"`
	Optional map[string]any `json:"optional"`
}

// Payload is what is signed for the manifest digest in repository: cosign's simple-signing
// payload, naming the repository as cosign does by default.
func Payload(repository, digest string) ([]byte, error) {
	var p simpleSigning
	p.Critical.Identity.DockerReference = repository
	p.Critical.Image.DockerManifestDigest = digest
	p.Critical.Type = cosignSignatureType
	return json.Marshal(p)
}

// TagName is the tag cosign looks for the signatures of digest under: "sha256-<hex>.sig".
func TagName(digest string) string {
	return strings.Replace(digest, ":", "-", 1) + tagSuffix
}

// Tag is TagName(digest) in repo.
func Tag(repo name.Repository, digest string) name.Tag {
	return repo.Tag(TagName(digest))
}

// IsTag says whether ref is under a signature tag.
func IsTag(ref string) bool { return strings.HasSuffix(ref, tagSuffix) }

// Sign signs the payload: ECDSA over its SHA-256, ASN.1 encoded, in base64 as cosign's
// annotation holds it. The signature is deterministic (RFC 6979): the same payload and key give
// the same bytes, so a signature image is reproducible like the images.
func (s *Signer) Sign(payload []byte) (string, error) {
	sum := sha256.Sum256(payload)
	sig, err := s.key.Sign(nil, sum[:], crypto.SHA256)
	if err != nil {
		return "", err
	}
	return base64.StdEncoding.EncodeToString(sig), nil
}

// Image is the signature image for digest in repository: existing (the image under the
// signature tag, or nil) with a layer of s's signature added, as `cosign sign` adds one. It
// returns nil when existing already holds that signature: nothing to write.
func (s *Signer) Image(existing v1.Image, repository, digest string) (v1.Image, error) {
	payload, err := Payload(repository, digest)
	if err != nil {
		return nil, err
	}
	if existing != nil {
		has, err := s.signed(existing, payload)
		if err != nil {
			return nil, fmt.Errorf("read the signatures of %s@%s: %w", repository, digest, err)
		}
		if has {
			return nil, nil
		}
	} else {
		// cosign's empty signature image (pkg/oci/empty): OCI media types
		existing = mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	}
	b64, err := s.Sign(payload)
	if err != nil {
		return nil, err
	}
	return mutate.Append(existing, mutate.Addendum{
		Layer:       static.NewLayer(payload, MediaTypeSimpleSigning),
		Annotations: map[string]string{AnnotationSignature: b64},
	})
}

// signed says whether img holds a layer with payload signed by s.
func (s *Signer) signed(img v1.Image, payload []byte) (bool, error) {
	m, err := img.Manifest()
	if err != nil {
		return false, err
	}
	want, _, err := v1.SHA256(bytes.NewReader(payload))
	if err != nil {
		return false, err
	}
	for _, l := range m.Layers {
		if l.Digest == want && verifySignature(payload, l.Annotations[AnnotationSignature], &s.key.PublicKey) {
			return true, nil
		}
	}
	return false, nil
}

// signedBy says whether payload is a simple-signing payload for digest and b64 key's signature
// of it.
func signedBy(payload []byte, b64, digest string, key *ecdsa.PublicKey) bool {
	var p simpleSigning
	if json.Unmarshal(payload, &p) != nil || p.Critical.Image.DockerManifestDigest != digest {
		return false
	}
	return verifySignature(payload, b64, key)
}

// verifySignature says whether b64 is key's signature of payload.
func verifySignature(payload []byte, b64 string, key *ecdsa.PublicKey) bool {
	sig, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return false
	}
	sum := sha256.Sum256(payload)
	return ecdsa.VerifyASN1(key, sum[:], sig)
}

// NotSigned says that a signature image holds no signature of the digest by the key: none at
// all, or only others'.
type NotSigned struct {
	Digest     string
	Signatures int // how many the image holds
}

func (e *NotSigned) Error() string {
	return fmt.Sprintf("no signature of %s by the key (%d signatures, none by it)", e.Digest, e.Signatures)
}

// Verify is what `cosign verify --key` checks, without a transparency log: some layer of sigs
// is a simple-signing payload for digest signed by key. It is a *NotSigned when none is; any
// other error is one of reading sigs. What it reads is bounded: at most maxSignatures layers,
// each of at most maxPayload bytes (a larger one is no signature).
func Verify(sigs v1.Image, key *ecdsa.PublicKey, digest string) error {
	m, err := sigs.Manifest()
	if err != nil {
		return err
	}
	if len(m.Layers) > maxSignatures {
		return fmt.Errorf("%d signatures, more than the %d toa-deploy reads", len(m.Layers), maxSignatures)
	}
	for _, d := range m.Layers {
		if d.MediaType != MediaTypeSimpleSigning || d.Size > maxPayload {
			continue
		}
		payload, err := readPayload(sigs, d.Digest)
		if err != nil {
			return err
		}
		if signedBy(payload, d.Annotations[AnnotationSignature], digest, key) {
			return nil
		}
	}
	return &NotSigned{Digest: digest, Signatures: len(m.Layers)}
}

// readPayload reads the layer of sigs whose digest is h, at most maxPayload bytes of it.
func readPayload(sigs v1.Image, h v1.Hash) ([]byte, error) {
	l, err := sigs.LayerByDigest(h)
	if err != nil {
		return nil, err
	}
	rc, err := l.Compressed()
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	payload, err := io.ReadAll(io.LimitReader(rc, maxPayload+1))
	if err != nil {
		return nil, fmt.Errorf("read the signature %s: %w", h, err)
	}
	if len(payload) > maxPayload {
		return nil, fmt.Errorf("the signature %s is larger than its manifest says", h)
	}
	return payload, nil
}

// Merge adds the signatures of img that have does not hold to have: a signature image is a set
// of layers, one per signature (its payload, with the signature in an annotation), so one
// written elsewhere is added to the registry's, as `cosign sign` adds one, rather than put in
// its place. It returns nil when have holds them all: nothing to write.
func Merge(have, img v1.Image) (v1.Image, error) {
	haveManifest, err := have.Manifest()
	if err != nil {
		return nil, err
	}
	// two signers of one digest sign the same payload: a signature is its blob and annotations
	had := map[string]bool{}
	key := func(d v1.Descriptor) string { return fmt.Sprint(d.Digest, d.Annotations) }
	for _, l := range haveManifest.Layers {
		had[key(l)] = true
	}
	m, err := img.Manifest()
	if err != nil {
		return nil, err
	}
	var adds []mutate.Addendum
	for _, d := range m.Layers {
		if had[key(d)] {
			continue
		}
		l, err := img.LayerByDigest(d.Digest)
		if err != nil {
			return nil, err
		}
		adds = append(adds, mutate.Addendum{Layer: l, Annotations: d.Annotations, MediaType: d.MediaType})
	}
	if len(adds) == 0 {
		return nil, nil
	}
	return mutate.Append(have, adds...)
}
