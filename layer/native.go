package layer

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/toa-deploy/toa-deploy/internal/fault"
)

// nativePackage is an installed package that builds or downloads native code at install.
type nativePackage struct {
	Name    string
	Version string
	Path    string // under node_modules, like "a/node_modules/b"
	Why     string // "binding.gyp", "install: prebuild-install || node-gyp rebuild"
}

// Tools that install scripts run. builders compile, or download a binary for the machine they
// run on; loaders use a prebuilt binary the package ships for the platform, and compile when
// there is none.
var (
	builders = map[string]bool{"node-gyp": true, "node-pre-gyp": true, "prebuild-install": true, "cmake-js": true}
	loaders  = map[string]bool{"node-gyp-build": true, "node-gyp-build-optional-packages": true}
)

var scriptWord = regexp.MustCompile(`[^\s;&|()<>"'=]+`)

// packageJSON is what the native check reads of an installed package.
type packageJSON struct {
	Name                 string            `json:"name"`
	Version              string            `json:"version"`
	Scripts              map[string]string `json:"scripts"`
	Gypfile              *bool             `json:"gypfile"`
	OptionalDependencies map[string]string `json:"optionalDependencies"`
}

// findNative lists the packages under node_modules that build native code at install and ship
// nothing prebuilt for the install's platform.
func findNative(modules string, in *install) ([]nativePackage, error) {
	var found []nativePackage
	visit := func(dir, rel string, p packageJSON, _ bool) {
		if why := nativeReason(dir, modules, p, in); why != "" {
			found = append(found, nativePackage{Name: p.Name, Version: p.Version, Path: rel, Why: why})
		}
	}
	if err := walkPackages(modules, "", visit); err != nil {
		return nil, fmt.Errorf("look for native code in %s: %w", modules, err)
	}
	return found, nil
}

// nativeReason says why the package in dir builds native code at install, or "" when it does
// not, or ships a binary prebuilt for the install's platform that it loads instead.
func nativeReason(dir, modules string, p packageJSON, in *install) string {
	var reasons []string
	built, loaded := false, false
	for _, s := range []string{"preinstall", "install", "postinstall"} {
		script := p.Scripts[s]
		for _, word := range scriptWord.FindAllString(script, -1) {
			tool := path.Base(word)
			if builders[tool] || loaders[tool] {
				built = built || builders[tool]
				loaded = loaded || loaders[tool]
				reasons = append(reasons, s+": "+script)
				break
			}
		}
	}
	gyp := fileExists(filepath.Join(dir, "binding.gyp"))
	// npm runs `node-gyp rebuild` itself for a binding.gyp when there is no install or preinstall
	// script, unless "gypfile": false
	implicit := gyp && p.Scripts["install"] == "" && p.Scripts["preinstall"] == "" && (p.Gypfile == nil || *p.Gypfile)
	if gyp {
		why := "binding.gyp"
		if implicit {
			why = "binding.gyp, which npm builds with node-gyp rebuild"
		}
		reasons = append([]string{why}, reasons...)
	}
	if len(reasons) == 0 {
		return ""
	}
	if !built && !implicit && (prebuilt(dir, in) || optionalPrebuilt(dir, modules, p, in)) {
		return ""
	}
	return strings.Join(reasons, "; ")
}

// prebuilt reports whether the package ships, under prebuilds/<os>-<arch>/, a binary that
// node-gyp-build would load on the platform: its tags (name.napi.musl.armv7.node) agree with the
// platform's libc (musl needs the tag), ARM version and Node ABI.
func prebuilt(dir string, in *install) bool {
	dirs, err := os.ReadDir(filepath.Join(dir, "prebuilds"))
	if err != nil {
		return false
	}
	abi := nodeABI[major(in.baseNode)]
	if !in.otherNode && in.runner.Modules != "" {
		abi = in.runner.Modules
	}
	armv := ""
	switch {
	case in.cpu == "arm64":
		armv = "8"
	case in.cpu == "arm":
		armv = strings.TrimPrefix(in.platform.Variant, "v")
	}
	for _, d := range dirs {
		osName, archs, ok := strings.Cut(d.Name(), "-")
		if !ok || osName != in.platform.OS || !contains(strings.Split(archs, "+"), in.cpu) {
			continue
		}
		files, _ := os.ReadDir(filepath.Join(dir, "prebuilds", d.Name()))
		for _, f := range files {
			if tagsMatch(f.Name(), in.platform.Libc, armv, abi) {
				return true
			}
		}
	}
	return false
}

func tagsMatch(file, libc, armv, abi string) bool {
	if !strings.HasSuffix(file, ".node") {
		return false
	}
	tags := strings.Split(strings.TrimSuffix(file, ".node"), ".")[1:]
	var napi bool
	var fileLibc, fileArmv, fileABI, runtime string
	for _, t := range tags {
		switch {
		case t == "napi":
			napi = true
		case t == "glibc" || t == "musl":
			fileLibc = t
		case strings.HasPrefix(t, "armv"):
			fileArmv = strings.TrimPrefix(t, "armv")
		case strings.HasPrefix(t, "abi"):
			fileABI = strings.TrimPrefix(t, "abi")
		case t == "node" || t == "electron" || t == "node-webkit":
			runtime = t
		}
	}
	switch {
	case runtime != "" && runtime != "node":
		return false
	case fileLibc != libc && (fileLibc != "" || libc == "musl"):
		return false
	case fileArmv != "" && armv != "" && fileArmv != armv:
		return false
	case fileABI != "" && !napi && fileABI != abi:
		return false
	}
	return true
}

// optionalPrebuilt reports whether one of the package's optional dependencies is a prebuilt
// package for the platform (like @msgpackr-extract/msgpackr-extract-linux-arm64) and npm installed
// it.
func optionalPrebuilt(dir, modules string, p packageJSON, in *install) bool {
	platform := regexp.MustCompile(`(^|[-_/.])` + regexp.QuoteMeta(in.platform.OS+"-"+in.cpu) + `($|[-_.])`)
	for name := range p.OptionalDependencies {
		if !platform.MatchString(name) || strings.Contains(name, "musl") != (in.platform.Libc == "musl") {
			continue
		}
		if fileExists(filepath.Join(dir, "node_modules", name, "package.json")) ||
			fileExists(filepath.Join(modules, name, "package.json")) {
			return true
		}
	}
	return false
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// nativeError names every package that builds native code and what to do.
func nativeError(file, key string, in *install, natives []nativePackage) error {
	var why string
	switch {
	case in.native():
		why = fmt.Sprintf("for %s: its base has no /bin/sh and npm to run install scripts in, and toa-push runs none on the runner", in.platform)
	case in.foreign && in.otherNode:
		why = fmt.Sprintf("for %s with Node %s on this runner (%s)", in.platform, major(in.baseNode), in.runner)
	case in.foreign:
		why = fmt.Sprintf("for %s on this runner (%s)", in.platform, in.runner)
	default:
		why = fmt.Sprintf("for the base's Node %s on this runner's Node %s", major(in.baseNode), major(in.runner.Node))
	}
	count := "1 package builds"
	if len(natives) > 1 {
		count = fmt.Sprintf("%d packages build", len(natives))
	}
	lines := make([]string, len(natives))
	for i, n := range natives {
		lines[i] = fmt.Sprintf("%s@%s (node_modules/%s): %s", n.Name, n.Version, n.Path, n.Why)
	}
	return &fault.Input{File: file, Key: key, Err: ErrNativeCode,
		Message: fmt.Sprintf("%s native code when installed, which cannot be done %s:\n    %s",
			count, why, strings.Join(lines, "\n    ")),
		Hint: "build this platform on a runner of that platform and Node major, or choose packages that ship prebuilt binaries for it " +
			"(as esbuild and sharp do with a package per platform), or drop the platform from registry.platforms"}
}
