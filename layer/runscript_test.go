package layer

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// TestPlanScripts: arborist's order (shallower first, then by path), and each package after the
// packages with scripts it depends on, through packages without scripts and nested copies.
func TestPlanScripts(t *testing.T) {
	modules := t.TempDir()
	for loc, pkg := range map[string]string{
		"a":                  `{"name":"a","dependencies":{"b":"1","mid":"1"}}`,
		"b":                  `{"name":"b"}`,
		"mid":                `{"name":"mid","dependencies":{"c":"1"}}`,
		"mid/node_modules/c": `{"name":"c","optionalDependencies":{"b":"1"}}`,
		"z":                  `{"name":"z"}`,
		"@s/y":               `{"name":"@s/y","dependencies":{"z":"1","missing":"1"}}`,
	} {
		dir := filepath.Join(modules, filepath.FromSlash(loc))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "package.json"), []byte(pkg), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	pkgs := []scriptPackage{{Path: "mid/node_modules/c"}, {Path: "z"}, {Path: "b"}, {Path: "a"}, {Path: "@s/y"}}
	plan, err := planScripts(modules, pkgs)
	if err != nil {
		t.Fatal(err)
	}
	want := []scriptPlanPkg{
		{Location: "node_modules/@s/y", After: []int{3}},
		{Location: "node_modules/a", After: []int{2, 4}}, // b, and c through mid
		{Location: "node_modules/b", After: []int{}},
		{Location: "node_modules/z", After: []int{}},
		{Location: "node_modules/mid/node_modules/c", After: []int{2}},
	}
	if !reflect.DeepEqual(plan.Packages, want) {
		t.Errorf("plan = %+v\nwant %+v", plan.Packages, want)
	}
}

// TestBaseRunScript: npm's link followed inside the root (absolute and relative links), and
// "" for a layout without @npmcli/run-script.
func TestBaseRunScript(t *testing.T) {
	root := t.TempDir()
	npm := filepath.Join(root, "usr", "local", "lib", "node_modules", "npm")
	for _, f := range []string{"bin/npm-cli.js", "node_modules/@npmcli/run-script/lib/run-script-pkg.js",
		"node_modules/@npmcli/run-script/lib/node-gyp-bin/node-gyp", "node_modules/node-gyp/bin/node-gyp.js",
		"node_modules/@npmcli/node-gyp/package.json"} {
		mustWrite(t, filepath.Join(npm, f), "")
	}
	mustWrite(t, filepath.Join(npm, "package.json"), `{"name":"npm","version":"10.9.9"}`)
	if err := os.MkdirAll(filepath.Join(root, "usr", "local", "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../lib/node_modules/npm/bin/npm-cli.js", filepath.Join(root, "usr", "local", "bin", "npm")); err != nil {
		t.Fatal(err)
	}
	if got := baseRunScript(root); got != "/usr/local/lib/node_modules/npm" {
		t.Errorf("relative link: %q", got)
	}
	if err := os.Remove(filepath.Join(root, "usr", "local", "bin", "npm")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/usr/local/lib/node_modules/npm/bin/npm-cli.js", filepath.Join(root, "usr", "local", "bin", "npm")); err != nil {
		t.Fatal(err)
	}
	if got := baseRunScript(root); got != "/usr/local/lib/node_modules/npm" {
		t.Errorf("absolute link: %q", got)
	}
	if err := os.Remove(filepath.Join(npm, "node_modules", "@npmcli", "run-script", "lib", "run-script-pkg.js")); err != nil {
		t.Fatal(err)
	}
	if got := baseRunScript(root); got != "" {
		t.Errorf("without run-script: %q, want \"\"", got)
	}
}

func mustWrite(t *testing.T, file, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}
