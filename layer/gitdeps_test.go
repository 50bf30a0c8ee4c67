package layer

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toa-deploy/toa-deploy/internal/app/toa"
	"github.com/toa-deploy/toa-deploy/internal/fault"
)

// A git dependency with a prepare script is refused, named, and its prepare (and postinstall)
// never ran on the runner: npm, which runs them in the clone while it packs it, inherits
// npm_config_ignore_scripts.
func TestGitDependencyWithPrepare(t *testing.T) {
	npmTest(t)
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git on this runner")
	}
	marker := filepath.Join(t.TempDir(), "ran-on-the-runner")
	repo := filepath.Join(t.TempDir(), "prepared")
	mustWrite(t, filepath.Join(repo, "package.json"), `{"name": "toa-test-prepared", "version": "1.0.0",
  "scripts": {"prepare": "node -e \"require('fs').writeFileSync('`+marker+`', 'prepare')\"",
              "postinstall": "node -e \"require('fs').appendFileSync('`+marker+`', 'postinstall')\""}}`)
	mustWrite(t, filepath.Join(repo, "index.js"), "module.exports = 1\n")
	for _, args := range [][]string{{"init", "-q"}, {"add", "."}, {"-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x"}} {
		if out, err := exec.Command("git", append([]string{"-C", repo}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	dir := filepath.Join(t.TempDir(), "component")
	mustWrite(t, filepath.Join(dir, "package.json"), `{"name": "git-user", "private": true, "dependencies": {"toa-test-prepared": "git+file://`+repo+`"}}`)
	lock := exec.Command("npm", "install", "--package-lock-only", "--ignore-scripts", "--no-audit", "--no-fund")
	lock.Dir = dir
	lock.Env = append(os.Environ(), "npm_config_ignore_scripts=true")
	if out, err := lock.CombinedOutput(); err != nil {
		t.Fatalf("npm install --package-lock-only: %v\n%s", err, out)
	}
	os.Remove(marker)
	c := &toa.Component{Path: dir, Name: "git", Namespace: "default", Locator: toa.NewLocator("git", "default"),
		PackageJSON: filepath.Join(dir, "package.json"), Lockfile: filepath.Join(dir, "package-lock.json")}
	_, err := Dependencies(t.Context(), c, amd64, WithCacheDir(t.TempDir()), npmCache)
	var input *fault.Input
	if !errors.As(err, &input) || !errors.Is(err, ErrGitPrepare) || !strings.Contains(err.Error(), "toa-test-prepared@1.0.0") ||
		!strings.Contains(err.Error(), "depend on a published version") {
		t.Errorf("err = %v, want the refusal of the git dependency's prepare", err)
	}
	if data, err := os.ReadFile(marker); err == nil {
		t.Errorf("a script of the git dependency ran on the runner: %q", data)
	}
}
