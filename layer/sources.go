package layer

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/toa-deploy/toa-deploy/internal/app/toa"
	"github.com/toa-deploy/toa-deploy/internal/fault"
)

// Root is the folder of the image where the components are: /composition/<label>.
const Root = "composition"

// excluded are the names left out of a component's sources at any depth: what npm installs, the
// repository, and npm's configuration, which may hold credentials.
var excluded = map[string]bool{"node_modules": true, ".git": true, ".npmrc": true}

// Sources is the layer of one component's sources: its folder as /composition/<label>/, without
// node_modules, .git and .npmrc at any depth nor what its manifest's `ignore` leaves out
// (c.Ignore), with the package.json Toa declares (c.Declared()) when the component has none.
// The layer is written when one of its methods is first called,
// into the cache (WithCacheDir), in one pass; the methods return the error of that pass. The
// bytes depend only on the files' names, contents, symlink targets and execute bits, the
// component's label and the epoch (WithEpoch, SOURCE_DATE_EPOCH): the same in any folder.
func Sources(c *toa.Component, opts ...Option) (v1.Layer, error) {
	return SourcesOf([]*toa.Component{c}, opts...)
}

// SourcesOf is one layer of the sources of several components, each as Sources writes it, in the
// order of their labels: for neighbours that share a layer to keep an image under the registries'
// limits. Two components with the same label are an error.
func SourcesOf(components []*toa.Component, opts ...Option) (v1.Layer, error) {
	o, err := newOptions(opts)
	if err != nil {
		return nil, err
	}
	if len(components) == 0 {
		return nil, fmt.Errorf("a sources layer needs at least one component")
	}
	sorted := append([]*toa.Component(nil), components...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Locator.Label < sorted[j].Locator.Label })
	for i, c := range sorted {
		if err := checkLabel(c); err != nil {
			return nil, err
		}
		if i > 0 && sorted[i-1].Locator.Label == c.Locator.Label {
			return nil, fmt.Errorf("components %s and %s share the label %s", sorted[i-1].Path, c.Path, c.Locator.Label)
		}
		info, err := os.Stat(c.Path)
		if err != nil {
			return nil, fmt.Errorf("read the sources of %s: %w", c.Locator.ID, err)
		}
		if !info.IsDir() {
			return nil, fmt.Errorf("read the sources of %s: %s is not a folder", c.Locator.ID, c.Path)
		}
	}
	when, err := o.mtime() // as the environment says now, not when the layer is written
	if err != nil {
		return nil, err
	}
	o.epoch = &when
	return &lazyLayer{mediaType: o.mediaType, write: func() (*fileLayer, error) {
		return o.writeLayer(func(w *tarWriter) error {
			for _, c := range sorted {
				tree := treeOptions{skip: excluded, ignore: c.Ignore.Match}
				if c.PackageJSON == "" {
					tree.extra = map[string][]byte{"package.json": c.Declared()}
				}
				if err := w.tree(c.Path, Root+"/"+c.Locator.Label, tree); err != nil {
					return fmt.Errorf("write the sources of %s: %w", c.Locator.ID, err)
				}
			}
			return nil
		})
	}}, nil
}

// Secrets says which files of c's sources, as Sources writes them, usually hold secrets by their
// names (.env, private keys), in a warning that says how to leave them out; "" when none. It reads
// the folder's names only, so that toa-push says it on every run, --plan included, before anything
// is built.
func Secrets(c *toa.Component) (string, error) {
	var found []string
	err := filepath.WalkDir(c.Path, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == c.Path {
			return err
		}
		rel, err := filepath.Rel(c.Path, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if excluded[d.Name()] || c.Ignore.Match(rel) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if d.Type().IsRegular() && secretName(d.Name()) {
			found = append(found, rel)
		}
		return nil
	})
	if err != nil || len(found) == 0 {
		return "", err
	}
	return fmt.Sprintf("%s: %s %s in its sources and %s into its image; files of these names usually hold secrets: list them under `ignore:` in %s to leave them out, or remove them",
		c.Locator.ID, strings.Join(found, ", "), plural(len(found), "is", "are"), plural(len(found), "goes", "go"), fault.DisplayPath(c.Manifest)), nil
}

// secretName says whether a file's name is one that usually holds a secret: dotenv files (.env,
// .env.production; not the .example, .sample and .template ones that document them), private
// keys and keystores, and credential files.
func secretName(name string) bool {
	lower := strings.ToLower(name)
	if lower == ".env" || strings.HasPrefix(lower, ".env.") {
		for _, doc := range []string{".example", ".sample", ".template", ".dist", ".defaults"} {
			if strings.HasSuffix(lower, doc) {
				return false
			}
		}
		return true
	}
	switch lower {
	case "id_rsa", "id_dsa", "id_ecdsa", "id_ed25519", ".netrc", ".pgpass", ".htpasswd":
		return true
	}
	for _, ext := range []string{".pem", ".key", ".p12", ".pfx", ".jks", ".keystore"} {
		if strings.HasSuffix(lower, ext) {
			return true
		}
	}
	return false
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// checkLabel refuses a component whose label is not one folder name.
func checkLabel(c *toa.Component) error {
	l := c.Locator.Label
	if l == "" || l == "." || l == ".." || strings.ContainsAny(l, `/\`) {
		return fmt.Errorf("component %s has no usable label: '%s'", c.Path, l)
	}
	if !filepath.IsAbs(c.Path) {
		return fmt.Errorf("component %s: its path is not absolute", c.Locator.ID)
	}
	return nil
}
