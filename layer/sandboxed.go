package layer

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/toa-deploy/toa-deploy/sandbox"
)

// sandboxCommand completes c with what every run of other people's code in the base gets: the
// network of WithScriptNetwork, and warnings of how it ran, named by what runs (a build.run
// line, the install scripts of some packages).
func (o *options) sandboxCommand(c sandbox.Command, what string) sandbox.Command {
	c.Notice = o.warn
	return c
}

// chainID is the OCI chain ID of img's layers (the image spec's ChainID of its rootfs.diff_ids):
// what they hold, whatever config names them. The unpacking checks every layer against its diff
// ID, so a root made for this chain holds these layers and no others.
func chainID(img v1.Image) (v1.Hash, error) {
	cfg, err := img.ConfigFile()
	if err != nil {
		return v1.Hash{}, err
	}
	ids := cfg.RootFS.DiffIDs
	if len(ids) == 0 {
		return v1.Hash{}, fmt.Errorf("the image has no layers")
	}
	chain := ids[0]
	for _, id := range ids[1:] {
		sum := sha256.Sum256([]byte(chain.String() + " " + id.String()))
		chain = v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(sum[:])}
	}
	return chain, nil
}
