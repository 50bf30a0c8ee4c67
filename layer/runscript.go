package layer

import (
	_ "embed"
	"encoding/json"
	"errors"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"sort"
	"strings"

	"github.com/toa-deploy/toa-deploy/internal/fsys"
)

// runScriptJS runs the install scripts inside the base through the base npm's own
// @npmcli/run-script, without the npm CLI (see the file).
//
//go:embed runscript.js
var runScriptJS []byte

// runScriptsDir is where the driver and its plan are bound in the base, read-only.
const runScriptsDir = "/toa-run-scripts"

// scriptPlan is what runscript.js reads.
type scriptPlan struct {
	Npm      string          `json:"npm"`    // the base npm's package folder, in the base
	Prefix   string          `json:"prefix"` // the install's folder, in the base
	Command  string          `json:"command"`
	Jobs     int             `json:"jobs"`
	Packages []scriptPlanPkg `json:"packages"`
}

type scriptPlanPkg struct {
	Location string `json:"location"` // "node_modules/x/node_modules/y"
	After    []int  `json:"after"`    // the packages of the plan it depends on, at any depth
}

// baseRunScript finds the package folder of the base's npm (npm on the base's PATH, its link
// followed inside the root) when it holds what runscript.js needs: @npmcli/run-script, and the
// node-gyp it runs as npm does. "" for another layout (Debian's packaged npm, a base without
// npm): `npm rebuild` runs the scripts then.
func baseRunScript(root string) string {
	for _, bin := range []string{"usr/local/bin/npm", "usr/bin/npm", "bin/npm"} {
		file, ok := resolveInRoot(root, bin)
		if !ok {
			continue
		}
		for dir := path.Dir(file); dir != "." && dir != "/" && dir != ""; dir = path.Dir(dir) {
			var p struct{ Name string }
			data, err := os.ReadFile(filepath.Join(root, dir, "package.json"))
			if err != nil || json.Unmarshal(data, &p) != nil || p.Name != "npm" {
				continue
			}
			for _, need := range []string{"node_modules/@npmcli/run-script/lib/run-script-pkg.js",
				"node_modules/@npmcli/run-script/lib/node-gyp-bin/node-gyp", "node_modules/node-gyp/bin/node-gyp.js"} {
				if !fileExists(filepath.Join(root, dir, need)) {
					return ""
				}
			}
			// runscript.js requires @npmcli/node-gyp as run-script does: beside it or nested in it
			if !fileExists(filepath.Join(root, dir, "node_modules/@npmcli/node-gyp/package.json")) &&
				!fileExists(filepath.Join(root, dir, "node_modules/@npmcli/run-script/node_modules/@npmcli/node-gyp/package.json")) {
				return ""
			}
			return "/" + dir
		}
		return ""
	}
	return ""
}

// resolveInRoot follows the links of rel (relative to root) as they resolve inside the image,
// and returns the file's path relative to root.
func resolveInRoot(root, rel string) (string, bool) {
	parts := strings.Split(path.Clean(rel), "/")
	done := ""
	for hops := 0; len(parts) > 0; {
		next := path.Join(done, parts[0])
		parts = parts[1:]
		info, err := os.Lstat(filepath.Join(root, next))
		if err != nil {
			return "", false
		}
		if info.Mode()&os.ModeSymlink == 0 {
			done = next
			continue
		}
		if hops++; hops > 40 {
			return "", false
		}
		target, err := os.Readlink(filepath.Join(root, next))
		if err != nil {
			return "", false
		}
		if !path.IsAbs(target) {
			target = path.Join("/", done, target)
		}
		parts = append(strings.Split(strings.TrimPrefix(path.Clean(target), "/"), "/"), parts...)
		done = ""
	}
	return done, done != ""
}

// planScripts orders the packages as arborist's rebuild does (shallower first, then by path) and
// says, for each, the packages of the plan it depends on (through any packages between), which
// runscript.js runs first.
func planScripts(modules string, pkgs []scriptPackage) (scriptPlan, error) {
	deps := map[string][]string{} // location → names it depends on
	err := walkPackages(modules, "", func(dir, rel string, _ packageJSON, _ bool) {
		loc := "node_modules/" + rel
		if _, ok := deps[loc]; !ok {
			deps[loc] = nil // every installed package, for resolveDependency
		}
		var p struct {
			Dependencies         map[string]string `json:"dependencies"`
			OptionalDependencies map[string]string `json:"optionalDependencies"`
		}
		if data, err := os.ReadFile(filepath.Join(dir, "package.json")); err == nil && json.Unmarshal(data, &p) == nil {
			for name := range p.Dependencies {
				deps[loc] = append(deps[loc], name)
			}
			for name := range p.OptionalDependencies {
				deps[loc] = append(deps[loc], name)
			}
		}
	})
	if err != nil {
		return scriptPlan{}, err
	}
	locations := make([]string, len(pkgs))
	for i, p := range pkgs {
		locations[i] = "node_modules/" + p.Path
	}
	sort.Slice(locations, func(i, j int) bool {
		di, dj := strings.Count(locations[i], "node_modules/"), strings.Count(locations[j], "node_modules/")
		if di != dj {
			return di < dj
		}
		return strings.ToLower(locations[i]) < strings.ToLower(locations[j])
	})
	index := map[string]int{}
	for i, l := range locations {
		index[l] = i
	}
	plan := scriptPlan{Jobs: max(1, runtime.GOMAXPROCS(0)), Packages: make([]scriptPlanPkg, len(locations))}
	for i, l := range locations {
		after := []int{}
		seen := map[string]bool{l: true}
		var visit func(from string)
		visit = func(from string) {
			for _, name := range deps[from] {
				to := resolveDependency(deps, from, name)
				if to == "" || seen[to] {
					continue
				}
				seen[to] = true
				if k, ok := index[to]; ok {
					after = append(after, k)
				}
				visit(to)
			}
		}
		visit(l)
		sort.Ints(after)
		plan.Packages[i] = scriptPlanPkg{Location: l, After: after}
	}
	return plan, nil
}

// resolveDependency is where node finds the package name from the package at location from:
// its own node_modules, then each one above it; "" when it is not installed.
func resolveDependency(installed map[string][]string, from, name string) string {
	dir := from
	for {
		candidate := path.Join(dir, "node_modules", name)
		if _, ok := installed[candidate]; ok {
			return candidate
		}
		i := strings.LastIndex(dir, "node_modules/")
		if i < 0 {
			return ""
		}
		dir = strings.TrimSuffix(dir[:i], "/")
	}
}

// writeScriptPlan writes the driver and its plan into a new folder under parent, to be bound
// at runScriptsDir.
func writeScriptPlan(parent string, plan scriptPlan) (string, error) {
	dir, err := os.MkdirTemp(parent, "run-scripts-")
	if err != nil {
		return "", err
	}
	data, err := json.Marshal(plan)
	if err == nil {
		err = os.WriteFile(filepath.Join(dir, "plan.json"), data, 0o644)
	}
	if err == nil {
		err = os.WriteFile(filepath.Join(dir, "run.js"), runScriptJS, 0o644)
	}
	if err != nil {
		return "", errors.Join(err, fsys.RemoveAll(dir))
	}
	return dir, nil
}
