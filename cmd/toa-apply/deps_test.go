package main

import (
	"os/exec"
	"strings"
	"testing"
)

// toa-apply needs only the kustomization and cluster credentials: it links nothing of the push
// side (DESIGN.md's layout; issue 12). kustomize imports nothing of ours but fault and the apply
// order (internal/kinds).
func TestLinksNothingOfThePushSide(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	const module = "github.com/toa-deploy/toa-deploy/"
	forbidden := []string{module + "image", module + "layer", module + "extension", module + "manifest",
		module + "pipeline", module + "toa", "github.com/google/go-containerregistry", "github.com/docker/"}
	for _, pkg := range strings.Fields(string(out)) {
		for _, f := range forbidden {
			if pkg == f || strings.HasPrefix(pkg, strings.TrimSuffix(f, "/")+"/") {
				t.Errorf("toa-apply links %s", pkg)
			}
		}
	}
	out, err = exec.Command("go", "list", "-f", `{{join .Imports "\n"}}`, "../../kustomize").Output()
	if err != nil {
		t.Fatalf("go list kustomize: %v", err)
	}
	for _, pkg := range strings.Fields(string(out)) {
		if strings.HasPrefix(pkg, module) && pkg != module+"fault" && pkg != module+"internal/kinds" {
			t.Errorf("kustomize imports %s", pkg)
		}
	}
}
