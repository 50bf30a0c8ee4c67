package main

import (
	"os/exec"
	"strings"
	"testing"
)

// toa-apply needs only the kustomization (a folder, or an artifact in a registry) and cluster
// credentials: it links nothing of the push chain (DESIGN.md's layout; issues 12 and 25).
// It may link go-containerregistry and Docker's credential configuration, through artifact/ and
// registry/, to pull oci://REF as Flux does and check cosign signatures, with toa-push's one
// registry client and its bounds rather than a second client of its own (issue 37). kustomize
// (which rollout imports for the apply order), artifact, registry and sign import nothing of ours
// but fault, fsys (the bounded read of --ca-file), one another, the apply order (internal/kinds)
// and the check of Docker's config file before its keychain reads it (internal/keychain).
func TestLinksNothingOfThePushSide(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	const module = "github.com/toa-deploy/toa-deploy/"
	forbidden := []string{module + "image", module + "layer", module + "extension", module + "manifest",
		module + "pipeline", module + "toa", module + "attest",
		// of go-containerregistry, only what a pull needs: nothing that writes layouts or tarballs to disk
		"github.com/google/go-containerregistry/pkg/v1/layout", "github.com/google/go-containerregistry/pkg/v1/daemon"}
	for _, pkg := range strings.Fields(string(out)) {
		for _, f := range forbidden {
			if pkg == f || strings.HasPrefix(pkg, strings.TrimSuffix(f, "/")+"/") {
				t.Errorf("toa-apply links %s", pkg)
			}
		}
	}
	allowed := map[string]bool{module + "fault": true, module + "fsys": true, module + "registry": true, module + "sign": true,
		module + "internal/kinds": true, module + "internal/keychain": true}
	for _, dir := range []string{"../../kustomize", "../../artifact", "../../registry", "../../sign"} {
		out, err = exec.Command("go", "list", "-f", `{{join .Imports "\n"}}`, dir).Output()
		if err != nil {
			t.Fatalf("go list %s: %v", dir, err)
		}
		for _, pkg := range strings.Fields(string(out)) {
			if strings.HasPrefix(pkg, module) && !allowed[pkg] {
				t.Errorf("%s imports %s", dir, pkg)
			}
		}
	}
}
