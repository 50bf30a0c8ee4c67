package main

import (
	"os/exec"
	"strings"
	"testing"
)

// toa-apply has one conductor: every mode (apply, --diff, --history, --rollback, --delete) goes
// through release, and the command is flags and printing. It imports neither rollout nor
// revision itself (its tests may, to look at the cluster).
func TestOneConductor(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", `{{join .Imports "\n"}}`, ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	const module = "github.com/toa-deploy/toa-deploy/"
	for _, pkg := range strings.Fields(string(out)) {
		rel := strings.TrimPrefix(pkg, module)
		if rel == pkg {
			continue
		}
		// by the last element, so that the rule holds wherever the rooms are moved (internal/...)
		if name := rel[strings.LastIndex(rel, "/")+1:]; name == "rollout" || name == "revision" {
			t.Errorf("cmd/toa-apply imports %s: go through release", pkg)
		}
	}
}
