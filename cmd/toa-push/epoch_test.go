package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// SOURCE_DATE_EPOCH is read once, before any work, for every use of it (the layers, the images'
// configs, the SBOMs and provenance, the artifact): a value that is not a time is bad input
// (exit 2) that names the variable and what is wrong, whether toa-push pushes, plans, writes an
// OCI layout or pushes an artifact, and nothing is written. The registry refuses connections:
// a run that went past the check would fail with exit 1 instead.
func TestSourceDateEpochRefused(t *testing.T) {
	refuses := refusingAddr(t)
	values := map[string]string{
		"yesterday":  "'yesterday' is not a time: not a whole number of seconds since 1970-01-01",
		"-1":         "'-1' is not a time: before 1970-01-01",
		"9999999999": "'9999999999' is not a time: after 2242-03-16",
	}
	modes := map[string][]string{
		"push":         nil,
		"--plan":       {"--plan"},
		"--oci-layout": {"--oci-layout", "LAYOUT"},
		"--artifact":   {"--artifact", refuses + "/pushed/deploy:production"},
	}
	for mode, extra := range modes {
		for value, words := range values {
			t.Run(mode+" "+value, func(t *testing.T) {
				dir := copyApp(t, "pushed", refuses)
				layout := filepath.Join(t.TempDir(), "layout")
				t.Setenv("TOA_CACHE", t.TempDir())
				t.Setenv("SOURCE_DATE_EPOCH", value)
				args := []string{"--path", dir, "-k", filepath.Join(dir, "deployment")}
				for _, a := range extra {
					args = append(args, strings.ReplaceAll(a, "LAYOUT", layout))
				}
				start := time.Now()
				code, _, stderr := run(t, dir, args...)
				took := time.Since(start)
				t.Logf("exit %d after %s: %s", code, took.Round(time.Millisecond), strings.TrimSpace(stderr))
				if code != 2 || !strings.Contains(stderr, "SOURCE_DATE_EPOCH: "+words) {
					t.Errorf("exit %d, want 2 saying %q", code, "SOURCE_DATE_EPOCH: "+words)
				}
				if took > 20*time.Second {
					t.Errorf("took %s: the value is checked before any work", took)
				}
				for _, out := range []string{filepath.Join(dir, "deployment"), layout} {
					if _, err := os.Stat(out); err == nil {
						t.Errorf("%s written", out)
					}
				}
			})
		}
	}
}
