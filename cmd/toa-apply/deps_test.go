package main

import (
	"os/exec"
	"strings"
	"testing"
)

// toa-apply needs only the kustomization (a folder, or an artifact in a registry) and cluster
// credentials: it links nothing of the push side (DESIGN.md's layout; issues 12, 25 and 37). The
// rule is the house's: nothing under internal/push/ or internal/app/ (the Toa application as
// read from its folder), nor the push's top-level rooms layer/ (its sandbox too) and manifest/. It may link go-containerregistry and Docker's credential configuration, through
// internal/artifact and internal/registry, to pull oci://REF as Flux does and check cosign
// signatures, with toa-push's one registry client and its bounds rather than a second client of
// its own. The shared rooms it links (internal/ but internal/push/, internal/app/ and
// internal/apply/) and
// kustomize (which rollout imports for the apply order) import nothing of ours but one another.
func TestLinksNothingOfThePushSide(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	const module = "github.com/toa-deploy/toa-deploy/"
	pushSide := []string{module + "internal/push/", module + "internal/app/", module + "layer", module + "manifest",
		// of go-containerregistry, only what a pull needs: nothing that writes layouts or tarballs to disk
		"github.com/google/go-containerregistry/pkg/v1/layout", "github.com/google/go-containerregistry/pkg/v1/daemon"}
	var shared []string
	for _, pkg := range strings.Fields(string(out)) {
		for _, p := range pushSide {
			if pkg == strings.TrimSuffix(p, "/") || strings.HasPrefix(pkg, strings.TrimSuffix(p, "/")+"/") {
				t.Errorf("toa-apply links %s", pkg)
			}
		}
		if isShared(module, pkg) || pkg == module+"kustomize" {
			shared = append(shared, pkg)
		}
	}
	if len(shared) == 0 {
		t.Fatal("toa-apply links none of the shared rooms: the test no longer reads what it should")
	}
	for _, dir := range shared {
		out, err = exec.Command("go", "list", "-f", `{{join .Imports "\n"}}`, dir).Output()
		if err != nil {
			t.Fatalf("go list %s: %v", dir, err)
		}
		for _, pkg := range strings.Fields(string(out)) {
			if strings.HasPrefix(pkg, module) && !isShared(module, pkg) {
				t.Errorf("%s, which toa-apply links, imports %s", dir, pkg)
			}
		}
	}
}

// isShared says whether pkg is one of the rooms both commands may use: under internal/, not under
// internal/push/, internal/app/ or internal/apply/ (the test harness aside, which no command links).
func isShared(module, pkg string) bool {
	rel, ok := strings.CutPrefix(pkg, module+"internal/")
	return ok && !strings.HasPrefix(rel, "push/") && !strings.HasPrefix(rel, "app/") && !strings.HasPrefix(rel, "apply/") && !strings.HasPrefix(rel, "harness")
}
