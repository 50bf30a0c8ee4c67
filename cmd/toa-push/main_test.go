package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"github.com/toa-deploy/toa-deploy/internal/containerseccomp"
	"github.com/toa-deploy/toa-deploy/layer/sandbox"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toa-deploy/toa-deploy/internal/harness"
)

var update = flag.Bool("update", false, "rewrite the expected outputs under testdata")

// nodeInstall is what puts node on PATH, for the tests whose toa-push asks the extensions.
const nodeInstall = "install Node.js 20 or later (testdata/setup.sh says which); toa-push runs it to read the extension packages"

// binary is toa-push built once for the tests that run it as a user would.
var binary string

func TestMain(m *testing.M) {
	containerseccomp.Exec() // a test's toa-push as a CI job under a container's seccomp profile
	sandbox.Init()          // the tests run commands inside the images' roots
	if os.Getenv(launcherVariable) != "" {
		os.Exit(launch()) // measuring a run of toa-push (files_test.go)
	}
	flag.Parse()
	dir, err := os.MkdirTemp("", "toa-push-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "toa-push")
	if out, err := exec.Command("go", "build", "-o", binary, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build toa-push: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// run runs toa-push in dir and returns its exit code, stdout and stderr.
func run(t *testing.T, dir string, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "TOA_ENV=", "CI=true")
	return outcome(t, cmd)
}

// outcome runs a prepared command and returns its exit code, stdout and stderr; a command that
// cannot start ends the test.
func outcome(t *testing.T, cmd *exec.Cmd) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0, stdout.String(), stderr.String()
	case errors.As(err, &exit):
		return exit.ExitCode(), stdout.String(), stderr.String()
	}
	t.Fatalf("run %s: %v", cmd.Path, err)
	return 0, "", ""
}

// TestBrokenContexts runs toa-push --plan on every broken context of the corpus and checks the
// exact message and the exit code a user gets.
func TestBrokenContexts(t *testing.T) {
	harness.Program(t, "node", nodeInstall)
	root := filepath.Join("..", "..", "testdata", "broken")
	entries, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) < 25 {
		t.Fatalf("the corpus has %d cases", len(entries))
	}
	for _, e := range entries {
		dir := filepath.Join(root, e.Name())
		t.Run(e.Name(), func(t *testing.T) {
			args := []string{"--plan", "--path", "."}
			if env, err := os.ReadFile(filepath.Join(dir, "env")); err == nil {
				args = append(args, strings.TrimSpace(string(env)))
			}
			code, stdout, stderr := run(t, dir, args...)
			got := fmt.Sprintf("exit %d\n%s", code, stderr)
			wantFile := filepath.Join(dir, "want.txt")
			if *update {
				if err := os.WriteFile(wantFile, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(wantFile)
			if err != nil {
				t.Fatalf("%v (run with -update to write it, then review it)", err)
			}
			if got != string(want) {
				t.Errorf("got\n%s\nwant\n%s", got, want)
			}
			if code != 2 || stdout != "" {
				t.Errorf("bad input must exit 2 with nothing on stdout: exit %d, stdout %q", code, stdout)
			}
			if strings.Contains(stderr, "goroutine ") || strings.Contains(stderr, "panic") {
				t.Errorf("a stack trace reached the user:\n%s", stderr)
			}
		})
	}
}

func TestEnvironmentMistakenForAPath(t *testing.T) {
	code, _, stderr := run(t, filepath.Join("..", ".."), "--plan", "testdata/apps/derived")
	if code != 2 || !strings.Contains(stderr, "run toa-push --path testdata/apps/derived") {
		t.Errorf("exit %d:\n%s", code, stderr)
	}
}

// The plan of an application whose base registry is out of reach, and has never been reached
// (its digests are not in the cache), is printed, and the run fails: the kustomization asked for
// is not written.
func TestPlanJSON(t *testing.T) {
	harness.Program(t, "node", nodeInstall)
	t.Setenv("TOA_CACHE", t.TempDir())
	k := filepath.Join(t.TempDir(), "deployment")
	code, stdout, stderr := run(t, filepath.Join("..", "..", "testdata", "apps", "declared"), "--plan", "-o", "json", "--resolve-timeout", "2s", "-k", k, "production")
	if code == 0 || !strings.Contains(stderr, "the kustomization is not written: the tag of composition-front is not known") {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if _, err := os.Stat(k); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a kustomization without tags: %v", err)
	}
	for _, want := range []string{`"context": "shop"`, `"environment": "production"`, `"repository": "registry.internal/acme/shop/composition-front"`,
		`"id": "shop.orders"`, `"label": "shop-orders"`, `"unresolved": "the base`} {
		if !strings.Contains(stdout, want) {
			t.Errorf("plan lacks %s:\n%s", want, stdout)
		}
	}
}

// A `--plan` with nothing changed starts no extension bridge: the extensions' answers of the first
// run are the cache's while nothing they read has changed (issue 15). The bridges toa-push starts
// are counted through a node first on PATH. (`node --version`, which the layer room asks for the
// dependencies' hash, is not counted here: it is a process of its own, and not the bridge's.)
func TestPlanTwiceStartsNoBridge(t *testing.T) {
	real, err := exec.LookPath("node")
	if err != nil {
		t.Skip("no node on PATH")
	}
	bin, count := t.TempDir(), filepath.Join(t.TempDir(), "count")
	script := "#!/bin/sh\ncase \"$2\" in *\"toa-deploy's bridge\"*) printf x >> '" + count + "';; esac\nexec '" + real + "' \"$@\"\n"
	if err := os.WriteFile(filepath.Join(bin, "node"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	cache := t.TempDir()
	plan := func() int {
		t.Helper()
		os.Remove(count)
		cmd := exec.Command(binary, "--plan", "-o", "json", "--resolve-timeout", "2s", "-k", filepath.Join(t.TempDir(), "deployment"), "production")
		cmd.Dir = filepath.Join("..", "..", "testdata", "apps", "declared")
		cmd.Env = append(os.Environ(), "TOA_ENV=", "CI=true", "TOA_CACHE="+cache, "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"))
		code, _, stderr := outcome(t, cmd)
		// its base is out of reach here, and has never been reached: the plan is made and
		// printed, and the kustomization is not written (exit 1)
		if code != 0 && !strings.Contains(stderr, "the kustomization is not written") {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		data, _ := os.ReadFile(count)
		return len(data)
	}
	if n := plan(); n != 1 {
		t.Errorf("the first --plan started %d bridges, want 1", n)
	}
	if n := plan(); n != 0 {
		t.Errorf("a --plan with nothing changed started %d bridges", n)
	}
}
