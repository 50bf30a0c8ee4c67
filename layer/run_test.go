package layer

import (
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"

	"github.com/toa-deploy/toa-deploy/internal/debianbase"
	"github.com/toa-deploy/toa-deploy/internal/fault"
	"github.com/toa-deploy/toa-deploy/layer/sandbox"
)

func TestSplitLines(t *testing.T) {
	npm, shell := SplitLines([]string{"npm i -g semver@7.6.3", "# a comment", "echo test > /etc/x", "", "npm config set a b && apk add git"})
	if strings.Join(npm, "|") != "npm i -g semver@7.6.3" || strings.Join(shell, "|") != "echo test > /etc/x|npm config set a b && apk add git" {
		t.Errorf("npm %q, shell %q", npm, shell)
	}
}

// TestRunInBase runs build.run lines in the Debian base: one layer with the file a line wrote and
// the whiteout of the base file another removed, with the argument in the lines' environment.
func TestRunInBase(t *testing.T) {
	base := debianbase.Image(t, "amd64")
	t.Setenv("TOA_TEST_ARGUMENT", "from-the-runner")
	t.Setenv("TOA_SIGN_KEY", "secret-key")
	start := time.Now()
	lines := []string{"echo test > /etc/toa-run-test", "rm /etc/debian_version", `echo "$TOA_TEST_ARGUMENT ${TOA_SIGN_KEY:-none}" > /etc/toa-run-env`}
	cache := t.TempDir()
	p := Platform{OS: "linux", Architecture: "amd64", Libc: "glibc"}
	l, err := Run(t.Context(), lines, nil, p, WithCacheDir(cache), WithBase(base), WithArguments("TOA_TEST_ARGUMENT"))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("ran in %s", time.Since(start))
	files := layerFiles(t, l)
	if got := string(files["etc/toa-run-test"]); got != "test\n" {
		t.Errorf("etc/toa-run-test = %q", got)
	}
	if _, ok := files["etc/.wh.debian_version"]; !ok {
		t.Errorf("no whiteout of etc/debian_version in %d entries", len(files))
	}
	if got := string(files["etc/toa-run-env"]); got != "from-the-runner none\n" {
		t.Errorf("the lines' environment: %q", got)
	}
	for name := range files {
		if !strings.HasPrefix(name, "etc/") {
			t.Errorf("the layer holds %s", name)
		}
	}
	start = time.Now()
	again, err := Run(t.Context(), lines, nil, p, WithCacheDir(cache), WithBase(base), WithArguments("TOA_TEST_ARGUMENT"))
	if err != nil {
		t.Fatal(err)
	}
	d1, _ := l.Digest()
	d2, _ := again.Digest()
	if d1 != d2 {
		t.Errorf("the second run made %s, the first %s", d2, d1)
	}
	t.Logf("again from the cache in %s", time.Since(start))
}

func TestRunWithoutShell(t *testing.T) {
	_, err := Run(t.Context(), []string{"echo test"}, nil, Platform{OS: "linux", Architecture: "amd64", Libc: "glibc"},
		WithCacheDir(t.TempDir()), WithBase(mutateEmpty(t)))
	var input *fault.Input
	if !errors.As(err, &input) || !errors.Is(err, ErrNoShell) {
		t.Fatalf("err = %v, want the input error of a base without a shell", err)
	}
	if want := "`echo test`: the base for linux/amd64 (glibc) has no /bin/sh to run it"; !strings.Contains(err.Error(), want) {
		t.Errorf("err = %q, want %q", err, want)
	}
}

// mutateEmpty is an image with no files: a base without a shell.
func mutateEmpty(t *testing.T) v1.Image {
	cfg, err := empty.Image.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture = "linux", "amd64"
	img, err := mutate.ConfigFile(empty.Image, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// TestCheckRunnerRunCached: before the base's libc is known, build.run lines for a CPU the runner
// has no emulator for are refused unless their layer is cached under one libc or the other.
func TestCheckRunnerRunCached(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skip("the test emulates arm64 on an amd64 runner")
	}
	base := debianbase.Image(t, "arm64")
	cache := t.TempDir()
	lines := []string{"echo test > /etc/toa-run-test"}
	if _, err := Run(t.Context(), lines, nil, Platform{OS: "linux", Architecture: "arm64", Libc: "glibc"}, WithCacheDir(cache), WithBase(base)); err != nil {
		t.Fatal(err)
	}
	t.Setenv(sandbox.BinfmtEnv, t.TempDir()) // no emulator from here on
	p := Platform{OS: "linux", Architecture: "arm64"}
	if err := CheckRunner(t.Context(), BaseWork{Shell: lines, Steps: Steps(lines)}, p, WithCacheDir(cache), WithBase(base)); err != nil {
		t.Errorf("the cached lines: %v", err)
	}
	err := CheckRunner(t.Context(), BaseWork{Shell: []string{"echo other > /etc/toa-run-test"}, Steps: Steps([]string{"echo other > /etc/toa-run-test"})}, p, WithCacheDir(cache), WithBase(base))
	var runner *sandbox.RunnerError
	if !errors.As(err, &runner) || !strings.Contains(err.Error(), "`echo other > /etc/toa-run-test`: cannot build for linux/arm64 inside its base on this runner: no emulator for arm64") {
		t.Errorf("lines not cached: %v, want the emulator refusal naming the line", err)
	}
}
