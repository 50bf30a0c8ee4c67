package harness

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Tool returns the path of a client the tests read our output with, built from its Go module by
// testdata/tools/install.sh into $TOA_CACHE/tools (default ~/.cache/toa-deploy/tools): "oras",
// "cosign"; Flux's "flux", "source-controller" and "kustomize-controller" by
// testdata/tools/flux.sh. A missing tool fails the test with what to run; under -short the test is skipped.
func Tool(t testing.TB, name string) string {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: this test needs " + name + ", built by testdata/tools/install.sh")
	}
	cache := os.Getenv("TOA_CACHE")
	if cache == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			t.Fatal(err)
		}
		cache = filepath.Join(home, ".cache", "toa-deploy")
	}
	path := filepath.Join(cache, "tools", name)
	if info, err := os.Stat(path); err != nil || info.Mode()&0o111 == 0 {
		script := "install.sh"
		if name == "flux" || strings.HasSuffix(name, "-controller") {
			script = "flux.sh" // Flux's own code, built by a script of its own
		}
		t.Fatalf("no %s at %s: run `bash testdata/tools/%s %s`, or `make test`, which runs it", name, path, script, name)
	}
	return path
}

// Program returns the path of a program on PATH that a test runs (node, diff). A missing one
// skips the test under -short (`make unit` on a machine with nothing installed) and fails it
// otherwise, saying what installs it.
func Program(t testing.TB, name, install string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err == nil {
		return path
	}
	if testing.Short() {
		t.Skipf("-short: this test needs %s, which is not on PATH", name)
	}
	t.Fatalf("no %s on PATH: %s", name, install)
	return ""
}
