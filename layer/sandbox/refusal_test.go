package sandbox

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

func TestNoEmulatorRegistered(t *testing.T) {
	t.Setenv(BinfmtEnv, t.TempDir())
	foreign := map[string]string{"amd64": "linux/arm64", "arm64": "linux/amd64"}[runtime.GOARCH]
	err := Check(foreign)
	var runner *RunnerError
	if !errors.As(err, &runner) {
		t.Fatalf("err = %v, want a RunnerError", err)
	}
	arch := strings.TrimPrefix(foreign, "linux/")
	for _, want := range []string{
		"cannot build for " + foreign + " inside its base on this runner: no emulator for " + arch + " is registered with binfmt_misc",
		"sudo apt-get install -y qemu-user-static binfmt-support",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("err = %q, want %q", err, want)
		}
	}
	if err := Check("linux/" + runtime.GOARCH); err != nil {
		t.Errorf("the runner's own platform: %v", err)
	}
}

// TestUserNamespacesRefused runs a sandbox where user namespaces are not allowed, as a user
// that cannot run it chrooted as another instead: root of a user namespace of unshare's that maps
// no other id, whose user.max_user_namespaces is 0. The error gives issue 36's three ways out.
func TestUserNamespacesRefused(t *testing.T) {
	if os.Getenv("TOA_SANDBOX_HELPER") == "1" {
		err := Run(t.Context(), Command{Root: t.TempDir(), Upper: filepath.Join(t.TempDir()), Platform: "linux/" + runtime.GOARCH, Args: []string{"true"}})
		fmt.Println(err)
		os.Exit(1)
	}
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skip("no unshare on this machine")
	}
	cmd := exec.Command("unshare", "--user", "--map-root-user", "sh", "-c",
		`echo 0 > /proc/sys/user/max_user_namespaces && exec "$0" -test.run='^TestUserNamespacesRefused$'`, os.Args[0])
	cmd.Env = append(os.Environ(), "TOA_SANDBOX_HELPER=1")
	out, _ := cmd.CombinedOutput()
	for _, want := range []string{
		"cannot build for linux/" + runtime.GOARCH + " inside its base on this runner: it does not let toa-push make user namespaces (user.max_user_namespaces is 0)",
		"run the job as root in its container",
		"or allow user namespaces on the runner (sudo sysctl -w user.max_user_namespaces=15000",
		"the AppArmor profile for toa-push that README's \"On the CI runners people use\" gives",
		"or pass --scripts-on-runner",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("output %q, want %q", out, want)
		}
	}
}

// TestSetupFailure: an init that cannot set the sandbox up is the runner's error, with the
// init's words, not the command's exit status, and the hint its cause calls for: a root removed
// under the run (by hand, or a cache cleaner) is not the kernel's doing.
func TestSetupFailure(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "missing")
	noProc := t.TempDir() // a root whose /proc and /dev were removed
	for _, tc := range []struct {
		name, root, words, hint, notHint string
	}{
		{"no root", missing, "mount an overlay over the base", "remove " + missing, "overlayfs"},
		{"no /proc in the root", noProc, "mount /proc: no such file or directory", "remove " + noProc, "overlayfs"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out strings.Builder
			err := Run(t.Context(), Command{Root: tc.root, Upper: t.TempDir(), Platform: "linux/" + runtime.GOARCH,
				Args: []string{"true"}, Stderr: &out})
			var runner *RunnerError
			if !errors.As(err, &runner) {
				t.Fatalf("err = %v, want the runner's error", err)
			}
			if !strings.Contains(runner.Message, tc.words) || !strings.Contains(runner.Hint, tc.hint) || strings.Contains(runner.Hint, tc.notHint) {
				t.Errorf("err = %v, want %q, a hint with %q and without %q", err, tc.words, tc.hint, tc.notHint)
			}
		})
	}
}
