package artifact

import (
	"context"
	"crypto/ecdsa"
	"errors"
	"fmt"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"

	"github.com/toa-deploy/toa-deploy/internal/registry"
	"github.com/toa-deploy/toa-deploy/internal/sign"
)

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
// as `cosign verify --key` checks it without a transparency log (sign.Verify). what names it in
// errors.
func (r Registry) Verify(ctx context.Context, ref name.Digest, key *ecdsa.PublicKey, what string) error {
	tag := sign.Tag(ref.Context(), ref.DigestStr())
	sigs, err := r.reg.Image(ctx, tag) // bounded, its blobs checked against their digests
	var terr *transport.Error
	if errors.As(err, &terr) && terr.StatusCode == 404 {
		return &Unsigned{What: what, Reference: ref.String(), Why: "is not signed (no " + tag.TagStr() + " in its repository)"}
	}
	if err != nil {
		return registry.Wrap(fmt.Sprintf("the signatures of %s %s (%s)", what, ref, tag.TagStr()), "", err)
	}
	err = sign.Verify(sigs, key, ref.DigestStr())
	var none *sign.NotSigned
	if errors.As(err, &none) {
		return &Unsigned{What: what, Reference: ref.String(), Why: fmt.Sprintf("is not signed by the key (%d signatures under %s, none by it)", none.Signatures, tag.TagStr())}
	}
	if err != nil {
		return registry.Wrap(fmt.Sprintf("the signatures of %s %s (%s)", what, ref, tag.TagStr()), "", err)
	}
	return nil
}
