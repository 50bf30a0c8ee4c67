// Package lockfile is the one reader of npm's lockfiles in toa-deploy: which file npm reads for a
// package (Find: npm-shrinkwrap.json over package-lock.json), and what a lockfile of npm 7 or
// later says of each package it installs (Parse, Read, Decode), package-lock.json,
// npm-shrinkwrap.json and the hidden lockfile npm writes into node_modules alike. The install
// (layer), the local packages it reads (toa), the script plan and the SBOM (attest) all read them
// here, so that they never disagree on the file or on a field. Every read is bounded (MaxSize).
// It imports nothing of the project but fsys.
package lockfile

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"

	"github.com/toa-deploy/toa-deploy/internal/fsys"
)

// The files npm reads and writes.
const (
	Shrinkwrap  = "npm-shrinkwrap.json" // npm reads it over PackageLock: a published package's own lock
	PackageLock = "package-lock.json"
	Hidden      = ".package-lock.json" // in node_modules: what npm installed there (npm 7 and later)
)

// MaxSize bounds what is read of one lockfile: a large monorepo's is some MiB.
const MaxSize = fsys.MaxLockSize

// ErrFormat is what the error of a file that is not a lockfile of npm 7 or later wraps: JSON
// that does not parse, or a lockfileVersion 1 without "packages". npm says what is wrong with
// such a file when it reads it, so most readers take it as no lockfile.
var ErrFormat = errors.New("not a lockfile of npm 7 or later")

// Find is the lockfile npm reads in dir, as npm chooses it: npm-shrinkwrap.json over
// package-lock.json, or "" without either. Whether it can be read is Read's to say.
func Find(dir string) string {
	for _, name := range []string{Shrinkwrap, PackageLock} {
		p := filepath.Join(dir, name)
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return ""
}

// HiddenIn is the hidden lockfile of the node_modules folder modules.
func HiddenIn(modules string) string { return filepath.Join(modules, Hidden) }

// Package is what a lockfile says of the package at one install path ("packages" of
// lockfileVersion 2 and 3).
type Package struct {
	// Path is its key in the lockfile: "node_modules/debug/node_modules/ms", or a folder
	// outside node_modules ("packages/a": a workspace, a `file:` folder).
	Path string `json:"-"`
	// Name is set by npm for aliases, links and workspaces only: see PackageName.
	Name      string  `json:"name"`
	Version   string  `json:"version"`
	Resolved  string  `json:"resolved"`  // where npm fetches it from; "file:..." for a local tarball
	Integrity string  `json:"integrity"` // "sha512-<base64>"
	License   License `json:"license"`
	Link      bool    `json:"link"` // a link to a folder (workspaces, `file:` folders)
	Dev       bool    `json:"dev"`
	Optional  bool    `json:"optional"`
	// DevOptional: needed only by dev packages, or optional ones
	DevOptional      bool `json:"devOptional"`
	HasInstallScript bool `json:"hasInstallScript"` // npm sets it for a binding.gyp too

	Dependencies         map[string]string `json:"dependencies"`
	OptionalDependencies map[string]string `json:"optionalDependencies"`
	PeerDependencies     map[string]string `json:"peerDependencies"`
}

// PackageName is the package's name: Name where npm wrote it, else the part of its Path after
// the last node_modules/ ("@s/b" of "node_modules/a/node_modules/@s/b"), else its folder's name.
func (p Package) PackageName() string {
	if p.Name != "" {
		return p.Name
	}
	if i := strings.LastIndex(p.Path, "node_modules/"); i >= 0 {
		return p.Path[i+len("node_modules/"):]
	}
	return path.Base(p.Path)
}

// Installed says whether the package is installed under node_modules, rather than being a
// folder of the project (a workspace, a `file:` folder).
func (p Package) Installed() bool { return strings.HasPrefix(p.Path, "node_modules/") }

// Local says whether the package comes from the disk rather than from a registry or a URL: a
// link, a folder outside node_modules, or a `file:` tarball.
func (p Package) Local() bool {
	return p.Link || !p.Installed() || strings.HasPrefix(p.Resolved, "file:")
}

// FromGit says whether the package is fetched from a git repository.
func (p Package) FromGit() bool {
	for _, prefix := range []string{"git+", "git:", "github:", "gitlab:", "bitbucket:"} {
		if strings.HasPrefix(p.Resolved, prefix) {
			return true
		}
	}
	return false
}

// SameInstall says whether p and o install the same thing: the same version, from the same
// place, with the same integrity, a link or not alike.
func (p Package) SameInstall(o Package) bool {
	return p.Version == o.Version && p.Resolved == o.Resolved && p.Integrity == o.Integrity && p.Link == o.Link
}

// License is a package's license as its package.json says it: a string (an SPDX expression),
// or the {"type": ...} object of old packages, of which npm keeps only the type too. Anything
// else (an array of old) is no license, not an error.
type License string

func (l *License) UnmarshalJSON(data []byte) error {
	var s string
	if json.Unmarshal(data, &s) == nil {
		*l = License(strings.TrimSpace(s))
		return nil
	}
	var o struct {
		Type string `json:"type"`
	}
	if json.Unmarshal(data, &o) == nil {
		*l = License(strings.TrimSpace(o.Type))
		return nil
	}
	*l = ""
	return nil
}

// Packages are a lockfile's packages by install path, without the root's entry ("").
type Packages map[string]Package

// Sorted are the packages in the order of their paths: a folder before what is in it.
func (ps Packages) Sorted() []Package {
	out := make([]Package, 0, len(ps))
	for _, p := range ps {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out
}

// Parse reads the packages of a lockfile of version 2 or 3. Its error wraps ErrFormat.
func Parse(data []byte) (Packages, error) {
	var lock struct {
		Version  int      `json:"lockfileVersion"`
		Packages Packages `json:"packages"`
	}
	if err := json.Unmarshal(data, &lock); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrFormat, err)
	}
	if lock.Packages == nil {
		return nil, fmt.Errorf("%w: lockfileVersion %d has no \"packages\" (npm 7 or later writes lockfileVersion 2 or 3)", ErrFormat, lock.Version)
	}
	delete(lock.Packages, "")
	for key, p := range lock.Packages {
		p.Path = key
		lock.Packages[key] = p
	}
	return lock.Packages, nil
}

// Read reads the lockfile at path, a regular file of at most MaxSize bytes (fsys.ReadFile: a
// named pipe or a device is refused, never waited on), and its packages (Parse). An error names
// the file; one of the contents wraps ErrFormat.
func Read(path string) (Packages, error) {
	data, err := fsys.ReadFile(path, MaxSize)
	if err != nil {
		return nil, err
	}
	pkgs, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return pkgs, nil
}

// Decode reads a lockfile from r, at most MaxSize bytes of it: one in a layer's stream.
func Decode(r io.Reader) (Packages, error) {
	data, err := io.ReadAll(io.LimitReader(r, MaxSize+1))
	if err != nil {
		return nil, err
	}
	if len(data) > MaxSize {
		return nil, fmt.Errorf("a lockfile of more than %s, the most toa-deploy reads of one", fsys.BytesText(MaxSize))
	}
	return Parse(data)
}
