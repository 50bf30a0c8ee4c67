package main

import (
	"context"
	"crypto/ecdsa"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/sirupsen/logrus"

	"github.com/toa-deploy/toa-deploy/internal/artifact"
	"github.com/toa-deploy/toa-deploy/internal/fault"
	"github.com/toa-deploy/toa-deploy/internal/registry"
	"github.com/toa-deploy/toa-deploy/internal/sign"
)

// ociFlags read a kustomization from a registry: toa-apply oci://REF[@DIGEST].
type ociFlags struct {
	VerifyKey string `name:"verify-key" placeholder:"FILE" help:"With oci://REF: refuse (exit 1) unless the artifact and every image its kustomization pins are signed by this cosign public key (cosign.pub), before anything is applied."`
	Insecure  bool   `name:"insecure" help:"With oci://REF: allow a registry with plain HTTP or a certificate that does not verify."`
	CAFile    string `name:"ca-file" type:"existingfile" placeholder:"FILE" help:"With oci://REF: trust this CA for the registry."`
}

// fromRegistry pulls the artifact DIR names when it is oci://REF[@DIGEST], verifies it with
// --verify-key, and unpacks it into a temporary folder, which becomes DIR for the rest of the
// run: it renders and applies as a folder does. The returned function removes the folder.
func (c *applyCommand) fromRegistry(ctx context.Context, log *logrus.Logger) (func(), error) {
	if !strings.HasPrefix(c.Dir, artifact.Scheme) || c.Rollback {
		if c.VerifyKey != "" {
			return nil, fault.BadInputf("--verify-key checks an artifact: give oci://REF, not a folder")
		}
		return func() {}, nil
	}
	var key *ecdsa.PublicKey
	if c.VerifyKey != "" {
		k, err := sign.ReadPublicKey(c.VerifyKey)
		if err != nil {
			return nil, err
		}
		key = k
	}
	// registry's client, as toa-push's: the same credentials, --ca-file read, retries and bounds
	reg, err := artifact.NewRegistry(registry.WithInsecure(c.Insecure), registry.WithCAFile(c.CAFile),
		registry.WithNotify(func(s string) { log.Warn(s) }))
	if err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp("", "toa-apply-artifact-")
	if err != nil {
		return nil, err
	}
	cleanup := func() { os.RemoveAll(tmp) }
	deadline, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()
	dir := filepath.Join(tmp, "kustomization")
	fetched, err := artifact.Fetch(deadline, c.Dir, dir, reg, key, artifact.DefaultLimits)
	if err != nil {
		cleanup()
		return nil, fmt.Errorf("toa-apply %s: %w", c.Dir, err)
	}
	for _, v := range fetched.Verified {
		log.Debugf("verified the signature of %s", v)
	}
	log.Infof("pulled %s (revision %q)", fetched.Reference, fetched.Annotations[artifact.AnnotationRevision])
	c.Dir = dir
	return cleanup, nil
}
