package layer

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toa-deploy/toa-deploy/internal/fault"
)

// pkg is an installed package of a fake node_modules.
type pkg struct {
	json  map[string]any
	files []string // other files, like binding.gyp or prebuilds/linux-x64/x.node
}

func writeModules(t *testing.T, pkgs map[string]pkg) string {
	t.Helper()
	modules := filepath.Join(t.TempDir(), "node_modules")
	for path, p := range pkgs {
		dir := filepath.Join(modules, filepath.FromSlash(path))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		data, _ := json.Marshal(p.json)
		os.WriteFile(filepath.Join(dir, "package.json"), data, 0o644)
		for _, f := range p.files {
			os.MkdirAll(filepath.Dir(filepath.Join(dir, f)), 0o755)
			os.WriteFile(filepath.Join(dir, f), nil, 0o644)
		}
	}
	return modules
}

func scripts(s map[string]string) map[string]any {
	m := map[string]any{"name": "x", "version": "1.0.0", "scripts": s}
	return m
}

func TestFindNative(t *testing.T) {
	runner := &Runner{Toolchain: Toolchain{Node: "20.20.2", Npm: "11.19.1"}, OS: "linux", CPU: "x64", Libc: "glibc", Modules: "115"}
	arm64 := &install{platform: Platform{"linux", "arm64", "", "glibc"}, cpu: "arm64", runner: runner, foreign: true, baseNode: "20.20.2"}
	amd64musl := &install{platform: Platform{"linux", "amd64", "", "musl"}, cpu: "x64", runner: runner, foreign: true, baseNode: "20.20.2"}
	armv7 := &install{platform: Platform{"linux", "arm", "v7", "glibc"}, cpu: "arm", runner: runner, foreign: true, baseNode: "20.20.2"}
	node24 := &install{platform: Platform{"linux", "amd64", "", "glibc"}, cpu: "x64", runner: runner, otherNode: true, baseNode: "24.14.0"}

	for _, c := range []struct {
		name string
		pkg  pkg
		in   *install
		want string // what the reason says, or "" for no refusal
	}{
		{"pure javascript", pkg{json: scripts(nil)}, arm64, ""},
		{"esbuild's postinstall check", pkg{json: scripts(map[string]string{"postinstall": "node install.js"})}, arm64, ""},
		{"sharp's check", pkg{json: scripts(map[string]string{"install": "node install/check"})}, arm64, ""},
		{"binding.gyp alone", pkg{json: scripts(nil), files: []string{"binding.gyp"}}, arm64, "node-gyp rebuild"},
		{"binding.gyp for another Node", pkg{json: scripts(nil), files: []string{"binding.gyp"}}, node24, "binding.gyp"},
		{"prebuild-install", pkg{json: scripts(map[string]string{"install": "prebuild-install || node-gyp rebuild --release"}), files: []string{"binding.gyp"}}, arm64, "install: prebuild-install"},
		{"node-pre-gyp", pkg{json: scripts(map[string]string{"install": "node-pre-gyp install --fallback-to-build"})}, arm64, "node-pre-gyp"},
		{"a path to node-gyp", pkg{json: scripts(map[string]string{"preinstall": "./node_modules/.bin/node-gyp configure"})}, arm64, "preinstall"},
		{"node-gyp-build without a prebuild for arm64",
			pkg{json: scripts(map[string]string{"install": "node-gyp-build"}), files: []string{"binding.gyp", "prebuilds/linux-x64/bufferutil.node", "prebuilds/darwin-x64+arm64/bufferutil.node"}},
			arm64, "install: node-gyp-build"},
		{"node-gyp-build with a prebuild for arm64",
			pkg{json: scripts(map[string]string{"install": "node-gyp-build"}), files: []string{"binding.gyp", "prebuilds/linux-arm64/x.armv8.node"}},
			arm64, ""},
		{"node-gyp-build with a glibc prebuild only, for musl",
			pkg{json: scripts(map[string]string{"install": "node-gyp-build"}), files: []string{"prebuilds/linux-x64/x.node"}},
			amd64musl, "node-gyp-build"},
		{"node-gyp-build with a musl prebuild",
			pkg{json: scripts(map[string]string{"install": "node-gyp-build"}), files: []string{"prebuilds/linux-x64/x.node", "prebuilds/linux-x64/x.musl.node"}},
			amd64musl, ""},
		{"node-gyp-build with armv6 only, for arm/v7",
			pkg{json: scripts(map[string]string{"install": "node-gyp-build"}), files: []string{"prebuilds/linux-arm/x.armv6.node"}},
			armv7, "node-gyp-build"},
		{"node-gyp-build with armv7",
			pkg{json: scripts(map[string]string{"install": "node-gyp-build"}), files: []string{"prebuilds/linux-arm/x.armv6.node", "prebuilds/linux-arm/x.armv7.node"}},
			armv7, ""},
		{"node-gyp-build with an ABI build of Node 20, for Node 24",
			pkg{json: scripts(map[string]string{"install": "node-gyp-build"}), files: []string{"prebuilds/linux-x64/x.abi115.node"}},
			node24, "node-gyp-build"},
		{"node-gyp-build with N-API, for Node 24",
			pkg{json: scripts(map[string]string{"install": "node-gyp-build"}), files: []string{"prebuilds/linux-x64/x.napi.node"}},
			node24, ""},
		{"an optional prebuilt package installed",
			pkg{json: map[string]any{"name": "msgpackr-extract", "version": "3.0.3", "scripts": map[string]string{"install": "node-gyp-build-optional-packages"},
				"optionalDependencies": map[string]string{"@msgpackr-extract/msgpackr-extract-linux-arm64": "3.0.3", "@msgpackr-extract/msgpackr-extract-linux-x64": "3.0.3"}},
				files: []string{"binding.gyp", "node_modules/@msgpackr-extract/msgpackr-extract-linux-arm64/package.json"}},
			arm64, ""},
		{"an optional prebuilt package of another platform",
			pkg{json: map[string]any{"name": "msgpackr-extract", "version": "3.0.3", "scripts": map[string]string{"install": "node-gyp-build-optional-packages"},
				"optionalDependencies": map[string]string{"@msgpackr-extract/msgpackr-extract-linux-arm64": "3.0.3", "@msgpackr-extract/msgpackr-extract-linux-x64": "3.0.3"}},
				files: []string{"binding.gyp", "node_modules/@msgpackr-extract/msgpackr-extract-linux-x64/package.json"}},
			arm64, "node-gyp-build-optional-packages"},
	} {
		t.Run(c.name, func(t *testing.T) {
			modules := writeModules(t, map[string]pkg{"@scope/x": c.pkg})
			found, err := findNative(modules, c.in)
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case c.want == "" && len(found) > 0:
				t.Errorf("refused: %+v", found)
			case c.want != "" && len(found) != 1:
				t.Errorf("found %+v", found)
			case c.want != "" && !strings.Contains(found[0].Why, c.want):
				t.Errorf("the reason %q does not say %q", found[0].Why, c.want)
			}
		})
	}
}

func TestNativeErrorNamesEveryPackage(t *testing.T) {
	runner := &Runner{Toolchain: Toolchain{Node: "20.20.2"}, OS: "linux", CPU: "x64", Libc: "glibc"}
	in := &install{platform: Platform{"linux", "arm64", "", "musl"}, cpu: "arm64", runner: runner, foreign: true, baseNode: "20.20.2"}
	modules := writeModules(t, map[string]pkg{
		"a":                   {json: map[string]any{"name": "a", "version": "1.0.0"}, files: []string{"binding.gyp"}},
		"b/node_modules/@s/c": {json: map[string]any{"name": "@s/c", "version": "2.0.0", "scripts": map[string]string{"install": "prebuild-install"}}},
		"d":                   {json: map[string]any{"name": "d", "version": "3.0.0"}},
	})
	found, err := findNative(modules, in)
	if err != nil {
		t.Fatal(err)
	}
	err = nativeError("/app/package.json", "", in, found)
	if !fault.IsInput(err) || !errors.Is(err, ErrNativeCode) {
		t.Fatalf("not a *fault.Input wrapping ErrNativeCode: %v", err)
	}
	for _, s := range []string{"a@1.0.0", "@s/c@2.0.0 (node_modules/b/node_modules/@s/c)", "linux/arm64 (musl)", "registry.platforms", "prebuilt"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("the error does not say %q:\n%s", s, err)
		}
	}
	if strings.Contains(err.Error(), "d@3.0.0") {
		t.Errorf("a plain package is named:\n%s", err)
	}
}
