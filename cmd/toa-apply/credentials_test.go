package main

import (
	"testing"
	"time"

	"github.com/toa-deploy/toa-deploy/internal/harness"
)

// A Docker config file that is not a regular file of at most 1 MiB (a named pipe, a link to
// /dev/zero, 2 MiB) is refused before go-containerregistry's keychain reads it, when toa-apply
// pulls an artifact: exit 2 within seconds, naming the file and what to do, under the memory cap.
func TestHostileDockerConfig(t *testing.T) {
	addr := harness.MemoryRegistry(t)
	for _, c := range harness.HostileDockerConfigs(t) {
		t.Run(c.Name, func(t *testing.T) {
			t.Setenv("HOME", t.TempDir())
			t.Setenv("DOCKER_CONFIG", c.Dir)
			toaApplyCapped(t, "oci://"+addr+"/app/deployment:1", "--render").check(t, c.Name, 2, 20*time.Second, c.Words...)
		})
	}
}
