package toa

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/toa-deploy/toa-deploy/internal/app/lockfile"
	"github.com/toa-deploy/toa-deploy/internal/fault"
	"github.com/toa-deploy/toa-deploy/internal/fsys"
)

// LocalPackage is a package a component installs from the disk rather than from a registry: a
// `file:` (or `link:`) dependency of its package.json, a folder or a tarball, or a package its
// lockfile names by path (a workspace's package, a `file:` dependency of a dependency). npm reads
// its files, so they are part of what the dependencies image is made of: its tag covers them.
type LocalPackage struct {
	Path string // absolute
	File string // the package.json or lockfile that names it
	Key  string // where File names it: "dependencies.x", `packages["../x"]`
	Spec string // as File writes it: "file:../x", "file:x-1.0.0.tgz"
}

// Tarball says whether the package is a file (a tarball npm pack made) rather than a folder.
func (l LocalPackage) Tarball() bool {
	info, err := os.Stat(l.Path)
	return err == nil && info.Mode().IsRegular()
}

// Hash is a digest of the package's contents: HashFiles of a folder, the sha256 of a tarball's
// bytes (read within fsys.MaxTarballSize, without blocking).
func (l LocalPackage) Hash() (string, error) { return HashLocalPackage(l.Path) }

// HashLocalPackage is LocalPackage.Hash of the package at path.
func HashLocalPackage(path string) (string, error) {
	info, err := os.Stat(path)
	if err != nil {
		return "", err
	}
	if info.IsDir() {
		return HashFiles(path)
	}
	f, err := fsys.Open(path, fsys.MaxTarballSize)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, io.LimitReader(f, fsys.MaxTarballSize+1))
	if err != nil {
		return "", fmt.Errorf("read %s: %w", path, err)
	}
	if n > fsys.MaxTarballSize {
		return "", fsys.TooLarge(path, -1, fsys.MaxTarballSize)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// localSpec is the path a dependency's value names, or "" when it names a registry's package.
func localSpec(value string) (string, bool) {
	for _, prefix := range []string{"file:", "link:"} {
		if rest, ok := strings.CutPrefix(value, prefix); ok {
			return rest, rest != ""
		}
	}
	if strings.HasPrefix(value, "./") || strings.HasPrefix(value, "../") || strings.HasPrefix(value, "/") {
		return value, true
	}
	return "", false
}

// LocalPackages reads the component's local packages from its package.json and its lockfile, in
// the order they are named, and checks that each is a folder or a regular file within
// fsys.MaxTarballSize: a link to /dev/zero would be read without end, a named pipe would block
// the run. Each refusal is an *fault.Input naming the file and the key. Load calls it, so that
// the refusal comes before anything is built.
func (c *Component) LocalPackages() ([]LocalPackage, error) {
	if c.PackageJSON == "" {
		return nil, nil
	}
	var pkg struct {
		Dependencies         map[string]any `json:"dependencies"`
		OptionalDependencies map[string]any `json:"optionalDependencies"`
	}
	if _, err := fsys.ReadJSON(c.PackageJSON, fsys.MaxPackageSize, &pkg); err != nil {
		return nil, err
	}
	var locals []LocalPackage
	seen := map[string]bool{}
	add := func(l LocalPackage, required bool) error {
		if !filepath.IsAbs(l.Path) {
			l.Path = filepath.Join(c.Path, l.Path)
		}
		l.Path = filepath.Clean(l.Path)
		if seen[l.Path] {
			return nil
		}
		seen[l.Path] = true
		if err := checkLocal(l, required); err != nil {
			return err
		}
		locals = append(locals, l)
		return nil
	}
	for _, section := range []struct {
		name string
		deps map[string]any
	}{{"dependencies", pkg.Dependencies}, {"optionalDependencies", pkg.OptionalDependencies}} {
		names := make([]string, 0, len(section.deps))
		for name := range section.deps {
			names = append(names, name)
		}
		sort.Strings(names)
		for _, name := range names {
			value, _ := section.deps[name].(string)
			spec, ok := localSpec(value)
			if !ok {
				continue
			}
			if err := add(LocalPackage{Path: spec, File: c.PackageJSON, Key: section.name + "." + name, Spec: value}, true); err != nil {
				return nil, err
			}
		}
	}
	if err := c.readLockedLocals(add); err != nil {
		return nil, err
	}
	return locals, nil
}

// readLockedLocals adds the packages the lockfile names by path: its keys outside node_modules
// (workspaces, `file:` folders) and the `file:` tarballs it resolved.
func (c *Component) readLockedLocals(add func(LocalPackage, bool) error) error {
	if c.Lockfile == "" {
		return nil
	}
	packages, err := lockfile.Read(c.Lockfile)
	if errors.Is(err, lockfile.ErrFormat) {
		return nil // npm says what is wrong with it, at the install
	}
	if err != nil {
		return err
	}
	for _, p := range packages.Sorted() {
		if strings.Contains(p.Path, "/node_modules/") {
			continue
		}
		at := fmt.Sprintf("packages[%q]", p.Path)
		if !p.Installed() {
			if err := add(LocalPackage{Path: p.Path, File: c.Lockfile, Key: at, Spec: p.Path}, false); err != nil {
				return err
			}
		}
		if spec, ok := strings.CutPrefix(p.Resolved, "file:"); ok && spec != "" {
			if err := add(LocalPackage{Path: spec, File: c.Lockfile, Key: at + ".resolved", Spec: p.Resolved}, false); err != nil {
				return err
			}
		}
	}
	return nil
}

// checkLocal refuses a local package that is neither a folder nor a regular file within
// fsys.MaxTarballSize, and one the package.json names that does not exist (required).
func checkLocal(l LocalPackage, required bool) error {
	refuse := func(what string) error {
		return &fault.Input{File: l.File, Key: l.Key, Message: fmt.Sprintf("is %q, %s", l.Spec, what),
			Hint: "point it at the package's folder, or at the tarball `npm pack` made of it"}
	}
	info, err := os.Stat(l.Path) // a stat follows a link and never blocks, whatever is there
	if errors.Is(err, fs.ErrNotExist) {
		if !required {
			return nil // npm ci says so, if it needs it
		}
		return refuse(fmt.Sprintf("and %s does not exist", l.Path))
	}
	if err != nil {
		return refuse(fmt.Sprintf("and %s cannot be read: %v", l.Path, err))
	}
	if info.IsDir() {
		return nil
	}
	if !info.Mode().IsRegular() {
		what := l.Path + " is"
		if target, err := filepath.EvalSymlinks(l.Path); err == nil && target != l.Path {
			what = fmt.Sprintf("%s links to %s, which is", l.Path, target)
		}
		return refuse(fmt.Sprintf("and %s %s, not a package's folder or tarball", what, fsys.Kind(info)))
	}
	if info.Size() > fsys.MaxTarballSize {
		return refuse(fmt.Sprintf("and %s is a tarball of %s, more than the %s toa-deploy reads of one", l.Path, fsys.BytesText(info.Size()), fsys.BytesText(fsys.MaxTarballSize)))
	}
	return nil
}
