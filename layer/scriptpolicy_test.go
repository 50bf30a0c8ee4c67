package layer

import (
	"bytes"
	"debug/elf"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toa-deploy/toa-deploy/internal/app/toa"
	"github.com/toa-deploy/toa-deploy/internal/fault"

	"github.com/toa-deploy/toa-deploy/internal/debianbase"
)

// TestAllowScriptsInBase: the component's package.json allows the addon's scripts and denies
// the marker's, in the keys `npm install-scripts approve|deny` writes for local packages
// (file: and the package's absolute path). For arm64, whose scripts run inside the base, the
// addon is built, the marker's postinstall is not run, and a warning names it and why: as the
// runner's npm 11 decides for a native install.
func TestAllowScriptsInBase(t *testing.T) {
	if runnerNpmRoot() == "" {
		t.Skip("the runner's npm has no allowScripts (npm 11 has)")
	}
	base := debianbase.Image(t, "arm64")
	root := t.TempDir()
	for _, d := range []string{"components/scripts", "packages/marker", "packages/native"} {
		copyDir(t, filepath.Join("testdata", d), filepath.Join(root, d))
	}
	dir := filepath.Join(root, "components", "scripts")
	pkg := `{
  "name": "scripts-user",
  "private": true,
  "dependencies": {
    "toa-test-marker": "file:../../packages/marker",
    "toa-test-native": "file:../../packages/native"
  },
  "allowScripts": {
    "file:` + filepath.Join(root, "packages", "native") + `": true,
    "file:` + filepath.Join(root, "packages", "marker") + `": false
  }
}
`
	if err := os.WriteFile(filepath.Join(dir, "package.json"), []byte(pkg), 0o644); err != nil {
		t.Fatal(err)
	}
	c := &toa.Component{Path: dir, Name: "scripts", Namespace: "default", Locator: toa.NewLocator("scripts", "default"),
		ModuleType: "commonjs", PackageJSON: filepath.Join(dir, "package.json"), Lockfile: filepath.Join(dir, "package-lock.json")}
	var warnings collect
	l, err := Dependencies(t.Context(), c, Platform{OS: "linux", Architecture: "arm64", Libc: "glibc"},
		WithCacheDir(t.TempDir()), WithBase(base), WithBaseNode("18.20.4"), WithWarnings(warnings.warn))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("warnings:\n%s", warnings.String())
	files := layerFiles(t, l)
	addon := files["composition/default-scripts/node_modules/toa-test-native/build/Release/addon.node"]
	if f, err := elf.NewFile(bytes.NewReader(addon)); err != nil || f.Machine != elf.EM_AARCH64 {
		t.Errorf("addon.node: not an aarch64 ELF (%v)", err)
	}
	if _, ok := files["composition/default-scripts/node_modules/toa-test-marker/marker.txt"]; ok {
		t.Error("the marker's postinstall ran, though allowScripts denies it")
	}
	w := warnings.String()
	if !strings.Contains(w, "toa-test-marker@1.0.0 (node_modules/toa-test-marker): postinstall") || !strings.Contains(w, "allowScripts (package.json) denies") {
		t.Errorf("no warning names the denied marker:\n%s", w)
	}
	if strings.Contains(w, "toa-test-native@1.0.0 (") {
		t.Errorf("a warning names the allowed addon:\n%s", w)
	}
}

func copyDir(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.Walk(src, func(p string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if info.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), data, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestMentionsScriptPolicy: npm is asked only when its allowScripts settings are spelt somewhere
// it reads them from.
func TestMentionsScriptPolicy(t *testing.T) {
	t.Setenv("npm_config_userconfig", filepath.Join(t.TempDir(), "none"))
	for _, c := range []struct {
		name, pkg, npmrc, env string
		want                  bool
	}{
		{"nothing", `{"name":"x"}`, "", "", false},
		{"package.json", `{"allowScripts":{"a":true}}`, "", "", true},
		{".npmrc", `{}`, "strict-allow-scripts=true\n", "", true},
		{"environment", `{}`, "", "npm_config_dangerously_allow_all_scripts", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			mustWrite(t, filepath.Join(dir, "package.json"), c.pkg)
			if c.npmrc != "" {
				mustWrite(t, filepath.Join(dir, ".npmrc"), c.npmrc)
			}
			if c.env != "" {
				t.Setenv(c.env, "true")
			}
			if got := mentionsScriptPolicy(&install{}, t.TempDir(), dir); got != c.want {
				t.Errorf("= %v, want %v", got, c.want)
			}
		})
	}
}

// TestStrictAllowScriptsInBase: with strict-allow-scripts in the project's .npmrc and no policy
// covering the packages, the install is refused as npm refuses it, naming them (bad input).
func TestStrictAllowScriptsInBase(t *testing.T) {
	if runnerNpmRoot() == "" {
		t.Skip("the runner's npm has no allowScripts (npm 11 has)")
	}
	base := debianbase.Image(t, "amd64")
	root := t.TempDir()
	for _, d := range []string{"components/scripts", "packages/marker", "packages/native"} {
		copyDir(t, filepath.Join("testdata", d), filepath.Join(root, d))
	}
	dir := filepath.Join(root, "components", "scripts")
	mustWrite(t, filepath.Join(dir, ".npmrc"), "strict-allow-scripts=true\n")
	c := &toa.Component{Path: dir, Name: "scripts", Namespace: "default", Locator: toa.NewLocator("scripts", "default"),
		ModuleType: "commonjs", PackageJSON: filepath.Join(dir, "package.json"), Lockfile: filepath.Join(dir, "package-lock.json")}
	_, err := Dependencies(t.Context(), c, Platform{OS: "linux", Architecture: "amd64", Libc: "glibc"},
		WithCacheDir(t.TempDir()), WithBase(base), WithBaseNode("18.20.4"), WithContextRoot(root))
	var input *fault.Input
	if !errors.As(err, &input) || !strings.Contains(err.Error(), "strict-allow-scripts: 2 packages") ||
		!strings.Contains(err.Error(), "toa-test-marker@1.0.0") || !strings.Contains(err.Error(), "toa-test-native@1.0.0") {
		t.Fatalf("err = %v, want the strict refusal naming both packages", err)
	}
}
