package main

import (
	"strings"
	"testing"
	"time"

	"github.com/toa-deploy/toa-deploy/internal/cli"
)

// --history-max takes 1 or more, as its message says: 0 and below are bad input (exit 2), told
// before a kubeconfig is read or a cluster asked, never taken as the default.
func TestHistoryMaxRefused(t *testing.T) {
	dir := t.TempDir()
	for _, n := range []string{"0", "-1"} {
		r := toaApply(t, "--history-max="+n, "--kubeconfig", "/nonexistent", dir)
		r.check(t, "--history-max "+n, cli.ExitBadInput, 10*time.Second, "--history-max must be 1 or more, not "+n)
	}
	r := toaApply(t, "--history-max", "1", "--render", dir)
	if r.code == cli.ExitBadInput && strings.Contains(r.stderr, "--history-max") {
		t.Errorf("--history-max 1 refused: %s", r)
	}
}
