package fsys

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"
)

// Cache is one of toa-push's caches under the cache root (CacheRoot). None is needed for
// correctness: each saves a process, a request or a build, and an entry that is missing, damaged
// or not a regular file is one the run makes again. This table is the one place that names them,
// with the folder, what names an entry and the most a run reads of one; README's "What is cached
// where" is checked against it by a test.
type Cache int

const (
	Layers       Cache = iota // the layers toa-push made, by digest
	DepsLayers                // which layer holds a component's node_modules for a platform
	GlobalLayers              // which layer holds the `npm i -g` lines of an image for a platform
	FileLayers                // which layer holds a list of files (layer.Files)
	PartLayers                // which layer holds a part of a split node_modules, by its tar stream
	Trees                     // the last node_modules each install made, for the next change of its lockfile
	Npm                       // npm's own cache (npm --cache), one entry
	Bases                     // what each base was last resolved to, for --plan offline
	Libc                      // each base digest's C library
	BaseRoots                 // each base's root file system, unpacked for the work in it
	Registries                // which repository of a registry holds which blob, for mounts
	Extensions                // the extensions' answers, with the fingerprints of their packages
	SBOMLayers                // the npm packages each layer holds, for the SBOMs
	Runner                    // what the runner's node says of itself
	Staging                   // the staging folders of installs under way: never pruned
	cacheCount
)

type cacheInfo struct {
	folder  string // under the root; "" for the root itself
	pattern string // the entries' names (filepath.Match); "" for the whole folder as one entry
	holds   string
	key     string
	bound   int64 // the most bytes read of one entry; 0 where it is streamed and checked by digest
	prune   bool  // whether Prune may remove its entries
}

var caches = [cacheCount]cacheInfo{
	Layers: {"layers/sha256", "*.tar.gz", "the layers toa-push made (node_modules, npm -g installs, sources)",
		"the layer's sha256 digest", 0, true},
	DepsLayers: {"layers/deps", "*.json", "which layer holds a component's node_modules for a platform",
		"sha256 of what the install reads", 64 << 10, true},
	GlobalLayers: {"layers/global", "*.json", "which layer holds an image's `npm i -g` lines for a platform",
		"sha256 of the lines and what npm reads", 64 << 10, true},
	FileLayers: {"layers/files", "*.json", "which layer holds a list of files",
		"sha256 of the files' names, modes and contents", 64 << 10, true},
	PartLayers: {"layers/parts", "*.json", "which layer holds a part of a split node_modules",
		"sha256 of the part's tar stream, or of its files' stats", 64 << 10, true},
	Trees: {"trees", "tree-*", "the last node_modules each install made, installed over when its lockfile changes",
		"sha256 of what the install reads but package.json and the lockfile", 0, true},
	Npm: {"npm", "", "npm's own cache (`npm --cache`)",
		"npm's (the packages' integrity)", 0, true},
	Bases: {"bases", "*.json", "what each base was last resolved to (for `--plan` offline)",
		"sha256 of the base's reference", 1 << 20, true},
	Libc: {"libc", "sha256-*", "each base's C library (glibc or musl)",
		"the base's manifest digest (its config's and layers' digests)", 64, true},
	BaseRoots: {"bases/roots", "sha256-*", "each base's root file system, unpacked for what runs in it (build.run lines, install scripts)",
		"the chain ID of the base's layers (rootfs.diff_ids, each layer checked against its own while unpacked)", 0, true},
	Registries: {"registries", "*.blobs", "which repository of a registry holds which blob (for mounts)",
		"the registry's host", 16 << 20, true},
	Extensions: {"extensions", "*.json", "the extensions' answers and the fingerprints of their packages",
		"sha256 of the bridge, node and the first request", 64 << 20, true},
	SBOMLayers: {"sbom/layers", "sha256-*.json", "the npm packages each layer of an image holds, for its SBOM",
		"the layer's digest", 64 << 20, true},
	Runner: {"", "runner.json", "what the runner's node says of itself",
		"the node binary's path, size, mtime and inode", 64 << 10, true},
	Staging: {"tmp", "", "staging folders of installs under way",
		"one per install", 0, false},
}

// folders reports whether the cache's entries are folders, each one entry removed whole, used
// when the folder itself was last modified (made, or touched when used).
func (c Cache) folders() bool { return c == Trees || c == BaseRoots }

// Caches are every cache, in the order of the table.
func Caches() []Cache {
	out := make([]Cache, cacheCount)
	for i := range out {
		out[i] = Cache(i)
	}
	return out
}

// Folder is the cache's folder, relative to the root ("" for the root itself).
func (c Cache) Folder() string { return filepath.FromSlash(caches[c].folder) }

// Pattern is the names of the cache's entries in its folder (filepath.Match), "" when the folder
// is one entry.
func (c Cache) Pattern() string { return caches[c].pattern }

// Holds says what the cache keeps, Key what names an entry, for the README's table.
func (c Cache) Holds() string { return caches[c].holds }

// Key says what names an entry.
func (c Cache) Key() string { return caches[c].key }

// Bound is the most bytes a run reads of one entry (Read), 0 for entries that are streamed and
// checked against their digest instead.
func (c Cache) Bound() int64 { return caches[c].bound }

// Dir is the cache's folder under root.
func (c Cache) Dir(root string) string { return filepath.Join(root, c.Folder()) }

// Path is the entry name under root.
func (c Cache) Path(root, name string) string { return filepath.Join(root, c.Folder(), name) }

// Read returns the bytes of the cache entry at path, and marks it used (Touch), or false when
// there is no usable entry: missing, not a regular file (a link to /dev/zero, a named pipe), or
// more than the cache's bound. It never blocks and never reads past the bound: a cache file is
// only ever a guess worth making again.
func (c Cache) Read(path string) ([]byte, bool) {
	limit := c.Bound()
	if limit <= 0 {
		limit = 64 << 10
	}
	f, err := Open(path, limit)
	if err != nil {
		return nil, false
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil || int64(len(data)) > limit {
		return nil, false
	}
	Touch(path)
	return data, true
}

// Touch marks a cache entry used now, for Prune's least-recently-used order. The modification
// time says it, not the access time, which mounts with noatime or relatime do not keep. A file
// that cannot be touched is only pruned sooner.
func Touch(path string) {
	now := time.Now()
	_ = os.Chtimes(path, now, now)
}

// CacheRoot is $TOA_CACHE, else $HOME/.cache/toa-deploy.
func CacheRoot() (string, error) {
	if dir := os.Getenv("TOA_CACHE"); dir != "" {
		return dir, nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("find the cache folder: %w; set TOA_CACHE", err)
	}
	return filepath.Join(home, ".cache", "toa-deploy"), nil
}
