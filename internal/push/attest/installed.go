package attest

import (
	"archive/tar"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"sort"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/toa-deploy/toa-deploy/internal/app/lockfile"
)

// Package is one npm package installed into an image, as npm recorded it.
type Package struct {
	Name      string // "@esbuild/linux-arm64"
	Version   string // "0.25.12"
	Resolved  string // where npm fetched it from, "" when npm did not record it
	Integrity string // "sha512-<base64>", "" when npm did not record it
	License   string // an SPDX expression as the package's package.json says it, or ""
	// Path is where it is installed, relative to the install's folder:
	// "node_modules/debug/node_modules/ms".
	Path     string
	Optional bool
	// Dependencies are the Paths of the installed packages it depends on, resolved as node
	// resolves require(): the nearest node_modules folder up from the package that has it.
	Dependencies []string
}

// Install is what one npm install put into a layer: a component's node_modules
// (composition/<label>/node_modules) or the global packages (usr/local/lib/node_modules).
type Install struct {
	// Root is the folder node_modules is in, inside the image: "composition/shop-orders",
	// "usr/local/lib" for `npm i -g`.
	Root     string
	Packages []Package // by Path
}

// maxManifest bounds what is read of one installed package.json.
const maxManifest = 1 << 20

// hiddenLockfile is npm's record of what it installed into a node_modules folder (npm 7 and
// later write it on every install: @npmcli/arborist, lib/shrinkwrap.js). Its entries carry each
// package's version, integrity, resolved URL (unless omit-lockfile-registry-resolved is set) and
// the license field of the package's own package.json (arborist's pkgMetaKeys).
const hiddenLockfile = "node_modules/" + lockfile.Hidden

// InstalledIn reads what npm installed into a layer that toa-push made of one npm install
// (layer.Dependencies, layer.Global), or nil when the layer holds no node_modules.
//
// Entries are in order, a folder before what it holds (layer/tar.go), so the hidden lockfile
// comes right after node_modules/.bin: reading stops there, and a layer in a registry costs a
// few kilobytes of its stream, not the whole blob. An install without a hidden lockfile (npm's
// global installs write none) is read from its packages' package.json files, to the end.
func InstalledIn(l v1.Layer) (*Install, error) {
	rc, err := l.Uncompressed()
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	return readInstall(rc)
}

func readInstall(r io.Reader) (*Install, error) {
	tr := tar.NewReader(r)
	var found *Install
	manifests := map[string]map[string]packageJSON{} // root → package path → its package.json
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("read the layer: %w", err)
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		name := strings.TrimPrefix(path.Clean("/"+h.Name), "/")
		if root, ok := strings.CutSuffix(name, "/"+hiddenLockfile); ok && !strings.Contains(root, "node_modules") {
			pkgs, err := parseLockfile(tr) // within lockfile.MaxSize
			if err != nil {
				return nil, fmt.Errorf("%s: %w", name, err)
			}
			return &Install{Root: root, Packages: pkgs}, nil
		}
		root, pkgPath, ok := packageRoot(name)
		if !ok {
			continue
		}
		var m packageJSON
		if err := json.NewDecoder(io.LimitReader(tr, maxManifest)).Decode(&m); err != nil {
			continue // a package.json npm did not read either; nothing to say of it
		}
		if manifests[root] == nil {
			manifests[root] = map[string]packageJSON{}
		}
		manifests[root][pkgPath] = m
	}
	for root, pkgs := range manifests { // one install per layer: at most one root
		found = &Install{Root: root, Packages: fromManifests(pkgs)}
	}
	return found, nil
}

// packageRoot splits ".../<root>/node_modules/<name>/package.json" (a scoped name has two
// segments) into root and "node_modules/<name>", for the outermost node_modules.
func packageRoot(name string) (root, pkgPath string, ok bool) {
	dir, file := path.Split(name)
	if file != "package.json" {
		return "", "", false
	}
	dir = strings.TrimSuffix(dir, "/")
	i := strings.Index(dir, "/node_modules/")
	if i < 0 {
		if !strings.HasPrefix(dir, "node_modules/") {
			return "", "", false
		}
		i = -1
	}
	root, pkgPath = "", dir
	if i >= 0 {
		root, pkgPath = dir[:i], dir[i+1:]
	}
	// the folder must be a package: node_modules/<name> or node_modules/@scope/<name>, nested
	// any number of times
	segments := strings.Split(pkgPath, "/")
	for j := 0; j < len(segments); {
		if segments[j] != "node_modules" || j+1 >= len(segments) {
			return "", "", false
		}
		j++
		if strings.HasPrefix(segments[j], "@") {
			j++
			if j >= len(segments) {
				return "", "", false
			}
		}
		j++
	}
	return root, pkgPath, true
}

// parseLockfile reads what a lockfile says npm installs, as an SBOM lists it: the packages under
// node_modules, dev packages left out (--omit=dev did), with the dependencies each resolves to.
func parseLockfile(r io.Reader) ([]Package, error) {
	locked, err := lockfile.Decode(r)
	if err != nil {
		return nil, err
	}
	return fromLockfile(locked), nil
}

func fromLockfile(locked lockfile.Packages) []Package {
	var out []Package
	for p, e := range locked {
		if !e.Installed() || e.Dev {
			continue // a workspace folder, or what --omit=dev left out
		}
		pkg := Package{Name: e.PackageName(), Version: e.Version, Resolved: e.Resolved, Integrity: e.Integrity,
			License: string(e.License), Path: p, Optional: e.Optional}
		for _, deps := range []map[string]string{e.Dependencies, e.OptionalDependencies, e.PeerDependencies} {
			for dep := range deps {
				if at := resolve(locked, p, dep); at != "" {
					pkg.Dependencies = append(pkg.Dependencies, at)
				}
			}
		}
		out = append(out, tidy(pkg))
	}
	sortPackages(out)
	return out
}

// packageJSON is what is read of an installed package's package.json when npm left no record.
type packageJSON struct {
	Name         string            `json:"name"`
	Version      string            `json:"version"`
	License      lockfile.License  `json:"license"`
	Resolved     string            `json:"_resolved"`  // npm 6 and older
	Integrity    string            `json:"_integrity"` // npm 6 and older
	Dependencies map[string]string `json:"dependencies"`
	Optional     map[string]string `json:"optionalDependencies"`
}

func fromManifests(pkgs map[string]packageJSON) []Package {
	var out []Package
	for p, m := range pkgs {
		pkg := Package{Name: m.Name, Version: m.Version, Resolved: m.Resolved, Integrity: m.Integrity,
			License: string(m.License), Path: p}
		if pkg.Name == "" {
			pkg.Name = nameOf(p)
		}
		for _, deps := range []map[string]string{m.Dependencies, m.Optional} {
			for dep := range deps {
				if at := resolve(pkgs, p, dep); at != "" {
					pkg.Dependencies = append(pkg.Dependencies, at)
				}
			}
		}
		out = append(out, tidy(pkg))
	}
	sortPackages(out)
	return out
}

// nameOf is the package name of an install path: "node_modules/a/node_modules/@s/b" → "@s/b".
func nameOf(p string) string { return lockfile.Package{Path: p}.PackageName() }

// resolve finds where require(dep) from the package at from lands, among the install paths
// of present: from's own node_modules, then each node_modules folder above it.
func resolve[V any](present map[string]V, from, dep string) string {
	has := func(p string) bool { _, ok := present[p]; return ok }
	dir := from
	for {
		if candidate := dir + "/node_modules/" + dep; has(candidate) {
			return candidate
		}
		i := strings.LastIndex(dir, "/node_modules/")
		if i < 0 {
			break
		}
		dir = dir[:i]
	}
	if candidate := "node_modules/" + dep; has(candidate) {
		return candidate
	}
	return ""
}

func tidy(p Package) Package {
	sort.Strings(p.Dependencies)
	p.Dependencies = compact(p.Dependencies)
	return p
}

func compact(s []string) []string {
	out := s[:0]
	for i, v := range s {
		if i == 0 || v != s[i-1] {
			out = append(out, v)
		}
	}
	return out
}

func sortPackages(p []Package) {
	sort.Slice(p, func(i, j int) bool { return p[i].Path < p[j].Path })
}

// Direct are the Paths of the packages a package.json's dependencies resolve to at the top of
// an install.
func (in *Install) Direct(names []string) []string {
	present := map[string]bool{}
	for _, p := range in.Packages {
		present[p.Path] = true
	}
	var out []string
	for _, n := range names {
		if p := "node_modules/" + n; present[p] {
			out = append(out, p)
		}
	}
	sort.Strings(out)
	return compact(out)
}

// layerPackages is what InstalledIn-like reading found of npm packages in one layer of a base:
// the package.json of every package under a node_modules folder, by the folder node_modules is
// in, and what the layer removes of the layers below it (OCI whiteouts).
type layerPackages struct {
	Roots     map[string]map[string]packageJSON `json:"roots,omitempty"`     // root → package path → its package.json
	Removed   []string                          `json:"removed,omitempty"`   // paths a whiteout removes
	Emptied   []string                          `json:"emptied,omitempty"`   // folders an opaque whiteout empties
	Installed *Install                          `json:"installed,omitempty"` // InstalledIn's, for a layer toa-push made
}

// readLayerPackages reads a base's layer to its end for the package.json of every package under
// any node_modules folder (npm's global installs, npm itself and its bundled packages in node
// images, a runtime installed with `npm i -g`), and its whiteouts.
func readLayerPackages(r io.Reader) (*layerPackages, error) {
	tr := tar.NewReader(r)
	out := &layerPackages{Roots: map[string]map[string]packageJSON{}}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("read the layer: %w", err)
		}
		name := strings.TrimPrefix(path.Clean("/"+h.Name), "/")
		dir, file := path.Split(name)
		dir = strings.TrimSuffix(dir, "/")
		switch {
		case file == ".wh..wh..opq":
			out.Emptied = append(out.Emptied, dir)
			continue
		case strings.HasPrefix(file, ".wh."):
			out.Removed = append(out.Removed, path.Join(dir, strings.TrimPrefix(file, ".wh.")))
			continue
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		root, pkgPath, ok := packageRoot(name)
		if !ok {
			continue
		}
		var m packageJSON
		if err := json.NewDecoder(io.LimitReader(tr, maxManifest)).Decode(&m); err != nil || m.Name == "" && m.Version == "" {
			continue // a package.json npm would not read either
		}
		if out.Roots[root] == nil {
			out.Roots[root] = map[string]packageJSON{}
		}
		out.Roots[root][pkgPath] = m
	}
}

// baseInstalls lays the layers' packages over each other, the lowest first, as a runtime
// unpacks them: what a whiteout removes goes, a package at the same path is replaced.
func baseInstalls(layers []*layerPackages) []*Install {
	all := map[string]map[string]packageJSON{}
	under := func(p, dir string) bool { return p == dir || strings.HasPrefix(p, dir+"/") || dir == "" }
	for _, l := range layers {
		for root, pkgs := range all {
			for p := range pkgs {
				full := path.Join(root, p)
				for _, gone := range l.Removed {
					if under(full, gone) {
						delete(pkgs, p)
					}
				}
				for _, dir := range l.Emptied {
					if full != dir && under(full, dir) {
						delete(pkgs, p)
					}
				}
			}
		}
		for root, pkgs := range l.Roots {
			if all[root] == nil {
				all[root] = map[string]packageJSON{}
			}
			for p, m := range pkgs {
				all[root][p] = m
			}
		}
	}
	roots := make([]string, 0, len(all))
	for root, pkgs := range all {
		if len(pkgs) > 0 {
			roots = append(roots, root)
		}
	}
	sort.Strings(roots)
	var out []*Install
	for _, root := range roots {
		out = append(out, &Install{Root: root, Packages: fromManifests(all[root])})
	}
	return out
}
