package sandbox

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// ChainID is the OCI chain ID of img's layers (image-spec, "Layer ChainID"): the digest of its
// config's rootfs.diff_ids, each over the ones below. It names what the layers hold once each
// was checked against its diff ID (Unpack does), where the config digest names a file that
// anyone can put over other layers: a cache of what a base's files made (an unpacked root, a
// layer built in the base) is keyed by it. A base whose manifest lists another number of layers
// than its config is refused; one of no layers is the digest of nothing.
func ChainID(img v1.Image) (v1.Hash, error) {
	chain, err := chainIDs(img)
	if err != nil {
		return v1.Hash{}, err
	}
	return chainKey(chain), nil
}

// chainKey is the chain ID of all the layers whose chain IDs are chain (chainIDs).
func chainKey(chain []v1.Hash) v1.Hash {
	if len(chain) == 0 {
		sum := sha256.Sum256(nil)
		return v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(sum[:])}
	}
	return chain[len(chain)-1]
}

// chainIDs are the chain IDs of each of img's layers with those below it: [i] is that of
// layers 0 to i.
func chainIDs(img v1.Image) ([]v1.Hash, error) {
	_, at, err := baseLayers(img)
	if err != nil {
		return nil, err
	}
	chain := make([]v1.Hash, len(at))
	for i, l := range at {
		if i == 0 {
			chain[i] = l.diffID
			continue
		}
		sum := sha256.Sum256([]byte(chain[i-1].String() + " " + l.diffID.String()))
		chain[i] = v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(sum[:])}
	}
	for _, c := range chain {
		if c.Algorithm != "sha256" || len(c.Hex) != sha256.Size*2 {
			return nil, fmt.Errorf("its config names a layer by %s, not a sha256 digest", c)
		}
	}
	return chain, nil
}
