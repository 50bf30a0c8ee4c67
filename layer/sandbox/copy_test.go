package sandbox

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestRunOnCopy runs a command in the arm64 base (under QEMU) as where the kernel refuses
// overlayfs: on a private copy, the cached root untouched, Changes naming what the command
// added and removed, and the notice saying which way it ran.
func TestRunOnCopy(t *testing.T) {
	t.Setenv(NoOverlayEnv, "1")
	root := debianRoot(t, "arm64", SandboxIDs())
	upper := filepath.Join(t.TempDir(), "upper")
	os.Mkdir(upper, 0o755)
	var notices []string
	for _, line := range []string{"node -p process.arch > /etc/marker", "rm /etc/debian_version"} {
		var out strings.Builder
		err := Run(t.Context(), Command{Root: root, Upper: upper, Platform: "linux/arm64", Args: []string{"/bin/sh", "-c", line},
			Env: []string{"PATH=/usr/local/bin:/usr/bin:/bin"}, Stdout: &out, Stderr: &out, Notice: func(s string) { notices = append(notices, s) }})
		if err != nil {
			t.Fatalf("%s: %v\n%s", line, err, out.String())
		}
	}
	if len(notices) != 1 || !strings.Contains(notices[0], "runs on a private copy of the base for linux/arm64 instead of an overlay") {
		t.Errorf("notices: %q, want one, for the run that made the copy", notices)
	}
	if _, err := os.Stat(filepath.Join(root, "etc", "marker")); err == nil {
		t.Error("the run wrote into the cached root")
	}
	if _, err := os.Stat(filepath.Join(root, "etc", "debian_version")); err != nil {
		t.Errorf("the run removed the cached root's file: %v", err)
	}
	var got []string
	err := Changes(root, upper, func(c Change) error {
		switch {
		case c.Whiteout:
			got = append(got, "-"+c.Name)
		case c.Info.Mode().IsRegular():
			data, _ := os.ReadFile(c.Path)
			got = append(got, c.Name+"="+strings.TrimSpace(string(data)))
		default:
			got = append(got, c.Name)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(got, " ") != "etc -etc/debian_version etc/marker=arm64" {
		t.Errorf("changes: %q", got)
	}
}

// TestCopyFails: where the kernel refuses overlayfs and the copy cannot be made, the runner's
// error says both.
func TestCopyFails(t *testing.T) {
	t.Setenv(NoOverlayEnv, "1")
	err := Run(t.Context(), Command{Root: filepath.Join(t.TempDir(), "missing"), Upper: t.TempDir(), Platform: "linux/" + runtime.GOARCH,
		Args: []string{"true"}})
	var runner *RunnerError
	if !errors.As(err, &runner) || !strings.Contains(err.Error(), "the kernel does not let a user namespace mount an overlay over the base") ||
		!strings.Contains(err.Error(), "the private copy of the base to run on instead failed") {
		t.Errorf("err = %v", err)
	}
}
