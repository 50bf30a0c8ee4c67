package manifest

import (
	"os/exec"
	"strings"
	"testing"
)

// manifest is toa-push's: it reads the apply order from internal/kinds, as toa-apply's side does,
// and imports nothing of toa-apply's side (kustomize, rollout; issue 22).
func TestImportsNothingOfTheApplySide(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	const module = "github.com/toa-deploy/toa-deploy/"
	for _, pkg := range strings.Fields(string(out)) {
		for _, f := range []string{module + "kustomize", module + "rollout"} {
			if pkg == f || strings.HasPrefix(pkg, f+"/") {
				t.Errorf("manifest imports %s", pkg)
			}
		}
	}
}
