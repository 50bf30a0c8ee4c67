package toa

import (
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/toa-deploy/toa-deploy/internal/fault"
	"github.com/toa-deploy/toa-deploy/internal/fsys"
)

// ContextFile is the name of a Toa context's file.
const ContextFile = "context.toa.yaml"

// topLevelKeys are the keys a context may have (DESIGN.md "Reading a Toa application").
var topLevelKeys = []string{"name", "version", "description", "runtime", "registry", "compositions",
	"resources", "mono", "ingress", "annotations", "evicted", "atomicity", "outbox", "inbox", "events",
	"environment", "packages"}

// contextShortcuts map a top-level key of the context to the package it annotates.
var contextShortcuts = map[string]string{
	"amqp":          "@toa.io/bindings.amqp",
	"node":          "@toa.io/bridges.node",
	"bash":          "@toa.io/bridges.bash",
	"mongodb":       "@toa.io/storages.mongodb",
	"sql":           "@toa.io/storages.sql",
	"queues":        "@toa.io/storages.queues",
	"exposition":    "@toa.io/extensions.exposition",
	"realtime":      "@toa.io/extensions.realtime",
	"configuration": "@toa.io/extensions.configuration",
	"origins":       "@toa.io/extensions.origins",
	"stash":         "@toa.io/extensions.stash",
	"storages":      "@toa.io/extensions.storages",
	"telemetry":     "@toa.io/extensions.telemetry",
	"introspection": "@toa.io/extensions.introspection",
}

// extensionShortcut resolves the short names a manifest's `extensions` may use.
func extensionShortcut(key string) (string, bool) {
	if indexOf(manifestExtensionKeys, key) >= 0 {
		return "@toa.io/extensions." + key, true
	}
	return "", false
}

func contextShortcut(key string) (string, bool) {
	pkg, ok := contextShortcuts[key]
	return pkg, ok
}

func resolveShortcut(key string, table func(string) (string, bool)) string {
	if pkg, ok := table(key); ok {
		return pkg
	}
	return key
}

var (
	contextNamePattern     = regexp.MustCompile(`^([a-zA-Z]+([_a-zA-Z0-9]*[a-zA-Z0-9]+)?)(-([a-zA-Z]+([_a-zA-Z0-9]*[a-zA-Z0-9]+)?))*$`)
	compositionNamePattern = regexp.MustCompile(`^[a-zA-Z]([a-zA-Z0-9]{1,31})?$`)
	platformPattern        = regexp.MustCompile(`^[a-z0-9]+/[a-z0-9_]+(/[a-z0-9]+)?$`)
	eventPattern           = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9]*\.[a-zA-Z][a-zA-Z0-9]*\.[a-zA-Z][a-zA-Z0-9]*$`)
)

// Load reads the Toa application whose context.toa.yaml is in the folder path, for environment
// env. env may be a chain, "staging:production": for each key the override of the first name that
// has one wins. An empty env drops every override.
func Load(path, env string) (*Application, error) {
	root, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("resolve %s: %w", path, err)
	}
	chain, err := environmentChain(env)
	if err != nil {
		return nil, err
	}
	file := filepath.Join(root, ContextFile)
	node, exists, err := readYAML(file)
	if err != nil {
		return nil, err
	}
	if !exists {
		return nil, &fault.Input{Message: fmt.Sprintf("there is no %s in %s", ContextFile, folderName(path, root)),
			Hint: "run in the folder of a Toa context, or point --path at it", Err: ErrNoContext}
	}
	// read when the dependencies are installed, and checked now, before anything is built
	if err := fsys.CheckFile(filepath.Join(root, ".npmrc"), fsys.MaxPackageSize); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	convolve(node, chain)
	app := &Application{Root: root, File: file}
	if len(chain) > 0 {
		app.Environment = chain[0]
	}
	ctx := field{file: file, node: node}
	if err := app.read(ctx); err != nil {
		return nil, err
	}
	return app, nil
}

// folderName names a folder as the user gave it, and the current one as such.
func folderName(given, abs string) string {
	if wd, err := os.Getwd(); err == nil && wd == abs {
		return "the current folder"
	}
	return given
}

func environmentChain(env string) ([]string, error) {
	if env == "" {
		return nil, nil
	}
	names := strings.Split(env, ":")
	for _, n := range names {
		if n == "" {
			return nil, &fault.Input{Message: fmt.Sprintf("Environment '%s' contains an empty name.", env),
				Hint: "name environments like 'staging' or chain them like 'staging:production'"}
		}
	}
	return names, nil
}

func (app *Application) read(ctx field) error {
	keys, err := ctx.mapping(nil, "")
	if err != nil {
		return err
	}
	for _, k := range keys {
		if indexOf(topLevelKeys, k) < 0 {
			if _, ok := contextShortcut(k); !ok {
				f, _ := ctx.child(k)
				f.node = keyNode(ctx.node, k)
				return f.fail("allowed keys: "+strings.Join(allowedContextKeys(), ", "), "is not a known key")
			}
		}
	}
	steps := []func(field) error{app.readIdentity, app.readRuntime, app.readRegistry, app.readResources,
		app.readMono, app.readIngress, app.readAnnotations, app.readExtras, app.readComponents,
		app.readCompositions, app.evict}
	for _, step := range steps {
		if err := step(ctx); err != nil {
			return err
		}
	}
	return nil
}

func allowedContextKeys() []string {
	all := append([]string(nil), topLevelKeys...)
	for k := range contextShortcuts {
		all = append(all, k)
	}
	sort.Strings(all)
	return all
}

// keyNode returns the key's own node, whose line is where the key is written.
func keyNode(mapping *yaml.Node, key string) *yaml.Node {
	for i := 0; i+1 < len(mapping.Content); i += 2 {
		if mapping.Content[i].Value == key {
			return mapping.Content[i]
		}
	}
	return nil
}

func (app *Application) readIdentity(ctx field) error {
	f, ok := ctx.child("name")
	if !ok {
		return &fault.Input{File: ctx.file, Key: "name", Message: "is required",
			Hint: "name the context, like `name: shop`: it names the images' repository and every deployed object's toa/context label"}
	}
	var err error
	if app.Name, err = f.pattern(contextNamePattern, "context name",
		"a context name is words of letters, digits and underscores joined by hyphens, starting with a letter, like 'online-shop'"); err != nil {
		return err
	}
	// Toa's pattern allows capitals and underscores, but the name becomes the images' repository
	// and the toa-<name> Secret that records the application, and neither a registry nor
	// Kubernetes takes them: Toa's own deploy failed there, at docker push or helm install.
	if strings.ToLower(app.Name) != app.Name || strings.Contains(app.Name, "_") {
		return f.fail("the name becomes the images' repository and Kubernetes object names, which take only lowercase letters, digits and hyphens: rename the context, like '"+deployableName(app.Name)+"'",
			"'%s' is a valid Toa context name but can not be deployed", app.Name)
	}
	if len(app.Name) > maxContextName {
		return f.fail(fmt.Sprintf("every deployed object carries the name as its toa/context label, and a Kubernetes label value is at most %d characters: shorten it", maxContextName),
			"'%s' is %d characters long", app.Name, len(app.Name))
	}
	if app.Version, err = ctx.optStr("version"); err != nil {
		return err
	}
	if app.Description, err = ctx.optStr("description"); err != nil {
		return err
	}
	if _, err = ctx.optStr("environment"); err != nil {
		return err
	}
	return nil
}

func (app *Application) readRuntime(ctx field) error {
	f, ok := ctx.child("runtime")
	switch {
	case !ok || f.isNull():
	case f.node.Kind == yaml.ScalarNode:
		app.Runtime.Version = f.node.Value
	default:
		if _, err := f.mapping([]string{"version", "registry", "proxy"}, ""); err != nil {
			return err
		}
		var err error
		if app.Runtime.Version, err = f.optStr("version"); err != nil {
			return err
		}
		for key, into := range map[string]*string{"registry": &app.Runtime.Registry, "proxy": &app.Runtime.Proxy} {
			u, present := f.child(key)
			if !present {
				continue
			}
			if *into, err = u.str(); err != nil {
				return err
			}
			if parsed, perr := url.Parse(*into); perr != nil || parsed.Scheme == "" || parsed.Host == "" {
				return u.fail("write a full URI, like http://npm.example.com:4873/", "'%s' is not a URI", *into)
			}
		}
	}
	app.Runtime.VersionSource = ContextFile
	if app.Runtime.Version != "" && app.Runtime.Version != "." {
		return nil
	}
	version, where, err := installedRuntime(app.Root)
	if err != nil {
		return err
	}
	if version == "" {
		return &fault.Input{File: ctx.file, Key: "runtime.version", Line: lineOf(ctx, "runtime"),
			Message: "is not given, and no @toa.io/runtime is installed under the context's node_modules",
			Hint:    "set `runtime: <version>` (like `runtime: 1.0.0-alpha.289`), or run `npm install` in the context's folder"}
	}
	app.Runtime.Version, app.Runtime.VersionSource = version, where
	return nil
}

func lineOf(ctx field, key string) int {
	if n := keyNode(ctx.node, key); n != nil {
		return n.Line
	}
	return 0
}

// installedRuntime reads the version of @toa.io/runtime under root's node_modules.
func installedRuntime(root string) (string, string, error) {
	p := filepath.Join(root, "node_modules", "@toa.io", "runtime", "package.json")
	var pkg struct {
		Version string `json:"version"`
	}
	_, err := fsys.ReadJSON(p, fsys.MaxPackageSize, &pkg)
	if errors.Is(err, fs.ErrNotExist) {
		return "", "", nil
	}
	if err != nil {
		return "", "", err
	}
	if pkg.Version == "" {
		return "", "", &fault.Input{File: p, Message: "has no version", Hint: "reinstall it with `npm install`"}
	}
	return pkg.Version, p, nil
}

func (app *Application) readRegistry(ctx field) error {
	f, ok := ctx.child("registry")
	if !ok || f.isNull() {
		return &fault.Input{File: ctx.file, Key: "registry", Line: lineOf(ctx, "registry"), Message: "is required",
			Hint: "say where images go, like `registry: registry.example.com/acme` or `registry: {base: localhost:5000}`"}
	}
	r := &app.Registry
	r.Services = "build"
	if f.node.Kind == yaml.ScalarNode {
		var err error
		if r.Base, err = f.registryBase(); err != nil {
			return err
		}
		r.Platforms, r.PlatformsDefaulted = DefaultPlatforms(), true
		return nil
	}
	if _, err := f.mapping([]string{"base", "platforms", "build", "credentials", "services"}, ""); err != nil {
		return err
	}
	var err error
	if b, present := f.child("base"); present {
		if r.Base, err = b.registryBase(); err != nil {
			return err
		}
	}
	if r.Credentials, err = f.optStr("credentials"); err != nil {
		return err
	}
	if s, present := f.child("services"); present {
		if r.Services, err = s.str(); err != nil {
			return err
		}
		if r.Services != "build" && r.Services != "published" {
			return s.fail("write `build` (build every extension's image) or `published` (use the images the extensions publish)",
				"'%s' is not a valid value", r.Services)
		}
	}
	if err := r.readPlatforms(f); err != nil {
		return err
	}
	return r.readBuild(f)
}

func (r *Registry) readPlatforms(registry field) error {
	f, ok := registry.child("platforms")
	if !ok {
		r.Platforms, r.PlatformsDefaulted = DefaultPlatforms(), true
		return nil
	}
	if f.isNull() {
		r.Platforms, r.PlatformsFromHost = []string{HostPlatform()}, true
		return nil
	}
	items, err := f.list(1, "list platforms like [linux/amd64, linux/arm64], or write `platforms: ~` for the runner's own")
	if err != nil {
		return err
	}
	for _, it := range items {
		p, err := it.pattern(platformPattern, "platform", "write os/architecture[/variant], like linux/amd64 or linux/arm/v7")
		if err != nil {
			return err
		}
		if indexOf(r.Platforms, p) >= 0 {
			return it.fail("list each platform once", "'%s' is listed twice", p)
		}
		r.Platforms = append(r.Platforms, p)
	}
	return nil
}

// HostPlatform is the runner's own architecture on linux: what `platforms: ~` builds for.
func HostPlatform() string {
	if runtime.GOARCH == "arm" {
		return "linux/arm/v7"
	}
	return "linux/" + runtime.GOARCH
}

func (r *Registry) readBuild(registry field) error {
	f, ok := registry.child("build")
	if !ok || f.isNull() {
		return nil
	}
	if _, err := f.mapping([]string{"image", "arguments", "run"}, ""); err != nil {
		return err
	}
	var err error
	if r.Build.Image, err = f.optImage("image"); err != nil {
		return err
	}
	if r.Build.Run, err = f.optStr("run"); err != nil {
		return err
	}
	if a, present := f.child("arguments"); present {
		if r.Build.Arguments, err = a.strings(0, false, "list the names of environment variables, like [NPM_TOKEN]"); err != nil {
			return err
		}
	}
	return nil
}

// maxContextName is the longest label value Kubernetes takes.
const maxContextName = 63

// deployableName suggests a name a registry and Kubernetes take for a context name that has
// capitals or underscores.
func deployableName(name string) string {
	return strings.ReplaceAll(strings.ToLower(name), "_", "-")
}
