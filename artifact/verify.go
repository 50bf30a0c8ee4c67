package artifact

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"

	"github.com/toa-deploy/toa-deploy/fault"
	"github.com/toa-deploy/toa-deploy/registry"
)

// What cosign writes and `cosign verify --key` reads (cosign v3: pkg/oci/static/signature.go;
// the payload is sigstore/sigstore's pkg/signature/payload), as attest's signer writes it: the
// signatures of a manifest digest are the layers of the image tagged sha256-<hex>.sig in the
// same repository, each a simple-signing payload with its base64 signature in an annotation.
const (
	mediaTypeSimpleSigning = "application/vnd.dev.cosign.simplesigning.v1+json"
	annotationSignature    = "dev.cosignproject.cosign/signature"
	maxPayload             = 64 << 10
	maxSignatures          = 100
)

// ReadPublicKey reads an ECDSA P-256 public key in PEM, as `cosign generate-key-pair` writes
// cosign.pub.
func ReadPublicKey(file string) (*ecdsa.PublicKey, error) {
	bad := func(msg string) error {
		return &fault.Input{File: file, Key: "--verify-key", Message: msg,
			Hint: "give the public key toa-push's --sign-key pairs with (cosign.pub, or `openssl ec -in KEY -pubout`)"}
	}
	f, err := os.Open(file)
	if err != nil {
		return nil, bad("cannot be read: " + err.Error())
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxPayload+1))
	if err != nil {
		return nil, bad("cannot be read: " + err.Error())
	}
	if len(data) > maxPayload {
		return nil, bad("is larger than a public key")
	}
	block, _ := pem.Decode(data)
	if block == nil || block.Type != "PUBLIC KEY" {
		return nil, bad("holds no PEM public key")
	}
	key, err := x509.ParsePKIXPublicKey(block.Bytes)
	if err != nil {
		return nil, bad("is not a public key toa-apply can read: " + err.Error())
	}
	ec, ok := key.(*ecdsa.PublicKey)
	if !ok || ec.Curve != elliptic.P256() {
		return nil, bad("is not an ECDSA P-256 public key")
	}
	return ec, nil
}

// Unsigned says that a manifest has no signature by the key: none at all, or only others'.
type Unsigned struct {
	What      string // "the artifact", "the image composition-front"
	Reference string // repository@digest
	Why       string
}

func (e *Unsigned) Error() string {
	return fmt.Sprintf("%s %s %s: nothing is applied", e.What, e.Reference, e.Why)
}

// Verify checks that the manifest ref names (by digest) is signed by key in cosign's format,
// as `cosign verify --key` checks it without a transparency log. what names it in errors.
func (r Registry) Verify(ctx context.Context, ref name.Digest, key *ecdsa.PublicKey, what string) error {
	tag := ref.Context().Tag(strings.Replace(ref.DigestStr(), ":", "-", 1) + ".sig")
	sigs, err := r.reg.Image(ctx, tag)
	var terr *transport.Error
	if errors.As(err, &terr) && terr.StatusCode == 404 {
		return &Unsigned{What: what, Reference: ref.String(), Why: "is not signed (no " + tag.TagStr() + " in its repository)"}
	}
	if err != nil {
		return registry.Wrap(fmt.Sprintf("the signatures of %s %s (%s)", what, ref, tag.TagStr()), "", err)
	}
	m, err := sigs.Manifest()
	if err != nil {
		return registry.Wrap(fmt.Sprintf("the signatures of %s %s (%s)", what, ref, tag.TagStr()), "", err)
	}
	if len(m.Layers) > maxSignatures {
		return fmt.Errorf("%s has %d signatures, more than toa-apply reads", tag, len(m.Layers))
	}
	for _, l := range m.Layers {
		if l.MediaType != mediaTypeSimpleSigning || l.Size > maxPayload {
			continue
		}
		payload, err := r.blob(ctx, ref.Context().Digest(l.Digest.String()), l, "a signature of "+what)
		if err != nil {
			return err
		}
		if signedBy(payload, l.Annotations[annotationSignature], ref.DigestStr(), key) {
			return nil
		}
	}
	return &Unsigned{What: what, Reference: ref.String(), Why: fmt.Sprintf("is not signed by the key (%d signatures under %s, none by it)", len(m.Layers), tag.TagStr())}
}

// signedBy says whether payload is cosign's simple-signing payload for digest and b64 key's
// signature of it.
func signedBy(payload []byte, b64, digest string, key *ecdsa.PublicKey) bool {
	var p struct {
		Critical struct {
			Image struct {
				DockerManifestDigest string `json:"docker-manifest-digest"`
			} `json:"image"`
		} `json:"critical"`
	}
	if json.Unmarshal(payload, &p) != nil || p.Critical.Image.DockerManifestDigest != digest {
		return false
	}
	sig, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return false
	}
	sum := sha256.Sum256(payload)
	return ecdsa.VerifyASN1(key, sum[:], sig)
}
