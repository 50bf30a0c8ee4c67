package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestResourceLimitCrashIsExit1: Go's runtime ends a process that runs out of memory with a
// fatal error, a trace and exit 2, the code for bad input. Under a `ulimit -v` that lets it
// start but not read a 60 MiB lockfile, toa-push's supervisor reports the crash in one line,
// writes the trace to a file, and exits 1; no trace reaches the user. The limit at which the
// worker crashes depends on the machine, so a few are tried: at least one must crash it. (At some
// limits the supervisor cannot start at all; those runs are logged, not judged.)
func TestResourceLimitCrashIsExit1(t *testing.T) {
	dir := copyApp(t, "locals", "127.0.0.1:1")
	component := filepath.Join(dir, "components", "shop.vendored")
	setDependency(t, component, "y", "file:../../vendor/y")
	packages := map[string]any{"": map[string]any{"name": "shop-vendored"}}
	for i := 0; i < 280000; i++ {
		packages[fmt.Sprintf("node_modules/p%d", i)] = map[string]any{"version": "1.0.0",
			"resolved": fmt.Sprintf("https://registry.invalid/p%d/-/p%d-1.0.0.tgz", i, i), "integrity": "sha512-" + strings.Repeat("A", 86) + "=="}
	}
	data, _ := json.Marshal(map[string]any{"name": "shop-vendored", "lockfileVersion": 3, "requires": true, "packages": packages})
	if err := os.WriteFile(filepath.Join(component, "package-lock.json"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("TOA_CACHE", t.TempDir())
	trace := regexp.MustCompile(`goroutine \d+|runtime\.\w+\(|\.go:\d+`)
	crashed := 0
	for _, kib := range []int{1400000, 1450000, 1500000, 1550000} {
		cmd := exec.Command("sh", "-c", fmt.Sprintf("ulimit -v %d && exec %s --plan --path %s -k %s", kib, binary, dir, filepath.Join(dir, "deployment")))
		cmd.Env = append(os.Environ(), "TOA_ENV=", "CI=true", "TMPDIR="+t.TempDir())
		start := time.Now()
		code, _, stderr := outcome(t, cmd)
		t.Logf("ulimit -v %d KiB: exit %d in %s: %s", kib, code, time.Since(start).Round(time.Millisecond), strings.TrimSpace(stderr))
		if !strings.Contains(stderr, "toa-push stopped: runtime") {
			// a limit so low that the supervisor itself cannot start (its threads' stacks do not
			// fit): no process of ours runs to report it, the runtime exits 2 before main
			continue
		}
		if trace.MatchString(stderr) {
			t.Errorf("a stack trace reached the user:\n%s", stderr)
		}
		crashed++
		if code != 1 || !strings.Contains(stderr, "(a limit of the machine: memory, threads or files); the runtime's trace is in ") {
			t.Errorf("exit %d, want 1 with where the trace is:\n%s", code, stderr)
		}
		file := strings.TrimSpace(stderr[strings.LastIndex(stderr, "trace is in ")+len("trace is in "):])
		if data, err := os.ReadFile(file); err != nil || !trace.Match(data) {
			t.Errorf("the trace file %s: %v\n%s", file, err, data)
		}
	}
	if crashed == 0 {
		t.Skip("no limit tried here ran toa-push out of memory after it started")
	}
}
