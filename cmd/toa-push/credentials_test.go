package main

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/toa-deploy/toa-deploy/internal/harness"
)

// A Docker config file that is not a regular file of at most 1 MiB (a named pipe, a link to
// /dev/zero, 2 MiB) is refused before go-containerregistry's keychain reads it: exit 2 within
// seconds, naming the file and what to do, far under the memory cap.
func TestHostileDockerConfig(t *testing.T) {
	if testing.Short() {
		t.Skip("runs toa-push against a registry, with node for the extensions' bridge")
	}
	target := harness.MemoryRegistry(t)
	for _, c := range harness.HostileDockerConfigs(t) {
		t.Run(c.Name, func(t *testing.T) {
			dir := hostileApp(t, target+"/bases/node:20", target, "")
			env := []string{"TOA_CACHE=" + t.TempDir(), "HOME=" + t.TempDir(), "DOCKER_CONFIG=" + c.Dir}
			code, stderr, took, peak := runCapped(t, dir, env, "--path", dir, "-k", filepath.Join(dir, "deployment"), "--timeout", "60s")
			t.Logf("%s: exit %d in %s, peak %d MiB:\n%s", c.Name, code, took.Round(time.Millisecond), peak>>20, stderr)
			if code != 2 {
				t.Errorf("exit %d, want 2", code)
			}
			if took > 30*time.Second {
				t.Errorf("took %s", took)
			}
			if peak > peakLimit {
				t.Errorf("peak resident memory %d MiB, over %d MiB", peak>>20, peakLimit>>20)
			}
			for _, w := range c.Words {
				if !strings.Contains(stderr, w) {
					t.Errorf("does not say %q", w)
				}
			}
		})
	}
}
