package toa

import (
	"path"
	"strings"

	"github.com/bmatcuk/doublestar/v4"
)

// Ignore is a component's `ignore:` in its manifest.toa.yaml: patterns of the files toa-push
// leaves out of its image and its version, as newer Toa reads them
// (runtime/norm/src/.component/.expand/version.js, after 289): fast-glob's patterns (`**` across
// folders, `*` within one, `?`, `[...]`, `{a,b}`), matched against paths relative to the
// component's folder, dot files included. A pattern that names a folder leaves out what is in
// it. manifest.toa.yaml is never left out: what a component declares is what its callers are
// held to. node_modules, .git and .npmrc are left out whatever the patterns say.
type Ignore []string

// Match reports whether the file or folder at rel (slash-separated, relative to the component's
// folder) is left out: rel, or a folder above it, matches a pattern.
func (ig Ignore) Match(rel string) bool {
	if len(ig) == 0 || rel == manifestFile {
		return false
	}
	for p := rel; p != "." && p != "/" && p != ""; p = path.Dir(p) {
		for _, pattern := range ig {
			if ok, _ := doublestar.Match(strings.TrimPrefix(pattern, "./"), p); ok {
				return true
			}
		}
	}
	return false
}

const manifestFile = "manifest.toa.yaml"
