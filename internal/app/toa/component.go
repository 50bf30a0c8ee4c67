package toa

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/bmatcuk/doublestar/v4"

	"github.com/toa-deploy/toa-deploy/internal/app/lockfile"
	"github.com/toa-deploy/toa-deploy/internal/fault"
	"github.com/toa-deploy/toa-deploy/internal/fsys"
)

// Component is one component of the application: a folder with a manifest.toa.yaml.
type Component struct {
	Path      string // its folder, absolute
	Manifest  string // its manifest.toa.yaml, absolute
	Name      string
	Namespace string
	Locator   Locator

	// Version is the declared `version`, else a hash of the component's files.
	Version         string
	VersionDeclared bool

	Build ComponentBuild
	// Ignore are the manifest's `ignore` patterns: files left out of its image and its version.
	Ignore Ignore

	// Extensions are the manifest's extension sections by package name: `exposition: ...` and
	// `extensions: {'@toa.io/extensions.exposition': ...}` alike.
	Extensions []Annotation

	// PackageJSON is the component's package.json, absolute, or "" when it has none: then the
	// image gets the one Toa declares (see Declared).
	PackageJSON string
	// Lockfile is the lockfile npm reads for it (lockfile.Find: npm-shrinkwrap.json over
	// package-lock.json), absolute, or "" without one.
	Lockfile string
	// ModuleType is "module" or "commonjs": what the nearest package.json at or above the
	// component's folder says, as Toa's declare() reads it.
	ModuleType string

	// What the manifest says of its connectors (see References, dependencies.go).
	Storage    string     // the package that stores its entity; "" without an entity
	Bindings   []string   // the binding packages of its operations and events, in first-use order
	Operations []string   // its operations: the manifest's, its code's, its prototype's, in Toa's order
	Events     []string   // the labels of the events it emits, in the same order
	Receivers  []Receiver // the events it consumes

	// Values is the whole manifest as plain values: the component extensions are handed.
	Values map[string]any
	// Raw is the same as JSON, its mappings' keys in the file's order (see Annotation.Raw).
	Raw json.RawMessage
}

// ComponentBuild is the manifest's `build`: a base image of its own and extra lines to run.
type ComponentBuild struct {
	Image string
	Run   string
}

// Declared returns the package.json Toa writes into the image for a component without one.
func (c *Component) Declared() []byte {
	b, _ := json.MarshalIndent(struct {
		Name    string `json:"name"`
		Private bool   `json:"private"`
		Type    string `json:"type"`
	}{c.Locator.Label, true, c.ModuleType}, "", "  ")
	return append(b, '\n')
}

// Locator names a component in its three spellings.
type Locator struct {
	ID        string // "dummies.one": how compositions list it
	Label     string // "dummies-one": how Kubernetes objects name it
	Uppercase string // "DUMMIES_ONE": how environment variables name it
}

// NewLocator spells a component's name and namespace as Toa's Locator does.
func NewLocator(name, namespace string) Locator {
	prefix := func(sep string) string {
		if namespace == "" {
			return ""
		}
		return namespace + sep
	}
	return Locator{
		ID:        prefix(".") + name,
		Label:     strings.ToLower(prefix("-") + name),
		Uppercase: strings.ToUpper(prefix("_") + name),
	}
}

var (
	componentNamePattern = regexp.MustCompile(`^[a-zA-Z]([a-zA-Z0-9]{1,31})?$`)
	componentIDPattern   = regexp.MustCompile(`^([a-zA-Z]+([_a-zA-Z0-9]*[a-zA-Z0-9]+)?)(\.([a-zA-Z]+([_a-zA-Z0-9]*[a-zA-Z0-9]+)?))$`)
)

// manifestExtensionKeys are the top-level manifest keys that are extension sections, in the order
// of Toa's table (runtime/norm/src/.component/.expand/extensions.js), which is the order it
// gathers them in; introspection came later, and telemetry is read here although Toa's table
// lacks it.
var manifestExtensionKeys = []string{"exposition", "realtime", "origins", "configuration", "state", "stash",
	"storages", "introspection", "telemetry"}

const componentNameHint = "a name or namespace is a letter followed by up to 31 letters or digits, like 'orders'"

// loadComponent reads the component in folder dir.
func loadComponent(dir string) (*Component, error) {
	path := filepath.Join(dir, "manifest.toa.yaml")
	root, exists, err := readYAML(path)
	if err != nil {
		return nil, err
	}
	if !exists {
		return nil, &fault.Input{File: dir, Message: "has no manifest.toa.yaml",
			Hint: "every folder under components/ is a component: add its manifest.toa.yaml, or move the folder out of components/"}
	}
	m := field{file: path, node: root}
	if _, err := m.mapping(nil, "a manifest is a mapping of keys like name, namespace, operations"); err != nil {
		return nil, err
	}
	c := &Component{Path: dir, Manifest: path}
	if err := c.readNames(m); err != nil {
		return nil, err
	}
	if err := c.readBuild(m); err != nil {
		return nil, err
	}
	if err := c.readExtensions(m); err != nil {
		return nil, err
	}
	if err := c.readConnectors(m); err != nil {
		return nil, err
	}
	if err := c.readIgnore(m); err != nil {
		return nil, err
	}
	if err := c.readPackage(); err != nil {
		return nil, err
	}
	if err := c.readVersion(m); err != nil { // hashes every file: after the checks of readPackage
		return nil, err
	}
	return c, nil
}

func (c *Component) readNames(m field) error {
	name, err := m.optStr("name")
	if err != nil {
		return err
	}
	namespace, err := m.optStr("namespace")
	if err != nil {
		return err
	}
	if name == "" {
		// Toa's defaults(): "dummies.one" is name "one" in namespace "dummies"
		parts := strings.Split(filepath.Base(c.Path), ".")
		name = parts[len(parts)-1]
		if namespace == "" && len(parts) > 1 {
			namespace = parts[len(parts)-2]
		}
		if !componentNamePattern.MatchString(name) || (namespace != "" && !componentNamePattern.MatchString(namespace)) {
			return &fault.Input{File: c.Manifest, Key: "name", Message: fmt.Sprintf(
				"is not given, and the folder name '%s' is not a valid namespace.name", filepath.Base(c.Path)),
				Hint: "give `name` (and `namespace`) in the manifest; " + componentNameHint}
		}
	}
	if f, ok := m.child("name"); ok && !componentNamePattern.MatchString(name) {
		return f.fail(componentNameHint, "'%s' is not a valid component name", name)
	}
	if f, ok := m.child("namespace"); ok {
		if !componentNamePattern.MatchString(namespace) {
			return f.fail(componentNameHint, "'%s' is not a valid namespace", namespace)
		}
		if namespace == "system" {
			return f.fail("choose another namespace", "'system' is reserved for Toa's own components")
		}
	}
	if namespace == "" {
		namespace = "default" // as Toa's schema default, and its feature files (default-stash)
	}
	c.Name, c.Namespace = name, namespace
	c.Locator = NewLocator(name, namespace)
	return nil
}

func (c *Component) readBuild(m field) error {
	b, ok := m.child("build")
	if !ok || b.isNull() {
		return nil
	}
	if _, err := b.mapping([]string{"image", "run"}, ""); err != nil {
		return err
	}
	var err error
	if c.Build.Image, err = b.optImage("image"); err != nil {
		return err
	}
	c.Build.Run, err = b.optStr("run")
	return err
}

// readExtensions reads the manifest's extension sections in the order Toa's expand() leaves them
// in: the `extensions` entries named by package, then the top-level sections, then the
// `extensions` entries named by shortcut, both in the order of Toa's table. The order is the
// order the extensions are met in, which is the order of the dependencies.
func (c *Component) readExtensions(m field) error {
	type section struct {
		pkg string
		f   field
	}
	var named, top, shortcuts []section
	for _, key := range manifestExtensionKeys {
		if f, ok := m.child(key); ok {
			top = append(top, section{"@toa.io/extensions." + key, f})
		}
	}
	if ext, ok := m.child("extensions"); ok && !ext.isNull() {
		keys, err := ext.mapping(nil, "`extensions` maps a package name to its section")
		if err != nil {
			return err
		}
		for _, key := range keys {
			f, _ := ext.child(key)
			pkg := resolveShortcut(key, extensionShortcut)
			if slices.ContainsFunc(top, func(s section) bool { return s.pkg == pkg }) {
				return f.fail("keep one of the two", "repeats the extension %s, also given at the top level", pkg)
			}
			if pkg == key {
				named = append(named, section{pkg, f})
			} else {
				shortcuts = append(shortcuts, section{pkg, f})
			}
		}
	}
	slices.SortStableFunc(shortcuts, func(a, b section) int {
		return slices.Index(manifestExtensionKeys, strings.TrimPrefix(a.pkg, "@toa.io/extensions.")) -
			slices.Index(manifestExtensionKeys, strings.TrimPrefix(b.pkg, "@toa.io/extensions."))
	})
	for _, s := range slices.Concat(named, top, shortcuts) {
		v, err := s.f.value()
		if err != nil {
			return err
		}
		raw, err := orderedJSON(s.f)
		if err != nil {
			return err
		}
		c.Extensions = append(c.Extensions, Annotation{Package: s.pkg, Value: v, Raw: raw})
	}
	return nil
}

func (c *Component) readVersion(m field) error {
	if f, ok := m.child("version"); ok {
		v, err := f.str()
		if err != nil {
			return err
		}
		c.Version, c.VersionDeclared = v, true
		return nil
	}
	v, err := HashFilesIgnoring(c.Path, c.Ignore)
	if err != nil {
		return fmt.Errorf("hash the files of component %s: %w", c.Locator.ID, err)
	}
	c.Version = v
	return nil
}

// readPackage finds the component's package files, and checks now, before anything is built,
// that those npm reads later (the lockfiles, .npmrc) are files toa-deploy would read.
func (c *Component) readPackage() error {
	for _, f := range []struct {
		name  string
		limit int64
		into  *string
	}{{"package.json", fsys.MaxPackageSize, &c.PackageJSON}, {lockfile.PackageLock, lockfile.MaxSize, nil},
		{lockfile.Shrinkwrap, lockfile.MaxSize, nil}, {".npmrc", fsys.MaxPackageSize, nil}} {
		p := filepath.Join(c.Path, f.name)
		err := fsys.CheckFile(p, f.limit)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		if f.into != nil {
			*f.into = p
		}
	}
	c.Lockfile = lockfile.Find(c.Path) // chosen once, as npm chooses
	t, err := moduleType(c.Path)
	if err != nil {
		return err
	}
	c.ModuleType = t
	_, err = c.LocalPackages() // checked now, before anything is built
	return err
}

// moduleType is Toa's format(): the nearest package.json at or above dir decides whether its
// .js files are ES modules. The file system's root itself is not looked at, as in Toa.
func moduleType(dir string) (string, error) {
	for current := dir; filepath.Dir(current) != current; current = filepath.Dir(current) {
		var pkg struct {
			Type any `json:"type"`
		}
		_, err := fsys.ReadJSON(filepath.Join(current, "package.json"), fsys.MaxPackageSize, &pkg)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return "", err
		}
		if pkg.Type == "module" {
			return "module", nil
		}
		return "commonjs", nil
	}
	return "commonjs", nil
}

// readIgnore reads `ignore`, a list of patterns (see Ignore). A `!pattern`, which in Toa puts
// back one of its bridge's own exclusions, is refused: toa-push's (node_modules, .git, .npmrc)
// are not to be shipped, and anything else is shipped unless a pattern leaves it out.
func (c *Component) readIgnore(m field) error {
	f, ok := m.child("ignore")
	if !ok || f.isNull() {
		return nil
	}
	const hint = "list patterns of files to leave out of the image, like `ignore: [.env, 'test/**', '*.log']`"
	patterns, err := f.strings(0, false, hint)
	if err != nil {
		return err
	}
	for i, p := range patterns {
		item := f.item(i)
		switch {
		case strings.HasPrefix(p, "!"):
			return item.fail("remove it: toa-push leaves node_modules, .git and .npmrc out of every image, and ships everything else a pattern does not leave out",
				"'%s' would put back a file toa-push leaves out", p)
		case p == "" || !doublestar.ValidatePattern(p):
			return item.fail(hint, "'%s' is not a pattern", p)
		}
	}
	c.Ignore = patterns
	return nil
}
