// Package extension asks a Toa application's extension and connector packages what they deploy.
// In Toa each package says so itself, in JavaScript, through the manifest(declaration, manifest)
// and deployment(instances, annotation) it exports, so toa-deploy does not re-implement them: a
// small Node program shipped inside the binary (node.js) loads each package from the
// application's node_modules, calls it with the values Toa passes, and hands back JSON. One node
// process serves a run; with a cache (WithCache) a run that asks what an earlier one asked, of the
// same packages, starts none. This room sits between toa, which reads the application's files and
// starts no process, and the packages that make images and objects of what the extensions
// declare.
package extension

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/toa-deploy/toa-deploy/internal/app/toa"
	"github.com/toa-deploy/toa-deploy/internal/fault"
)

//go:embed node.js
var program string

// Result is what the application depends on and what each dependency declares.
type Result struct {
	// Dependencies in Toa's order: the connectors, then the extensions, then the standalone
	// extensions the context annotates.
	Dependencies []*Dependency
	// Components are the components the extensions brought (their components()): they run
	// inside the extensions' services, and take variables like the context's own.
	Components []*toa.Component
	// Warnings say what a package declared that toa-push does not deploy, and what to do.
	Warnings []string
	// Started is the number of node processes this Resolve started: 0 when every answer came
	// from the cache.
	Started int
}

// Dependency is one package the application depends on, as installed.
type Dependency struct {
	Reference  string           // as the application names it: "@toa.io/bindings.amqp", or a path
	Name       string           // its package.json name
	Version    string           // its package.json version
	Dir        string           // its installed folder
	Instances  []*toa.Component // the components that use it
	Standalone bool             // deployed because the context annotates it, and it is standalone
	// Declaration is what its deployment() returned; nil when it exports none.
	Declaration *Declaration
}

// Option tunes Resolve.
type Option func(*options)

type options struct {
	node   string
	stderr io.Writer
	cache  string
}

// WithNode sets the node binary. Default: node on PATH.
func WithNode(path string) Option { return func(o *options) { o.node = path } }

// WithOutput sets where what the packages print goes. Default: discarded.
func WithOutput(w io.Writer) Option { return func(o *options) { o.stderr = w } }

// WithCache keeps the packages' answers under dir/extensions (see cache.go), so that a run
// asking what an earlier one asked, of the same packages, starts no node. Default: no cache.
func WithCache(dir string) Option { return func(o *options) { o.cache = dir } }

// Resolve works out the application's dependencies as Toa does (reference §1.6): the storages
// and bindings of the components' manifests, the extensions they name, the services the
// compositions list, the components those extensions bring (recursively), and the standalone
// extensions the context annotates; then asks each for its declaration (§4.1). The packages are
// the ones installed under the context's node_modules: the user runs `npm install` there first.
// Every mistake (a package not installed, one that throws, one whose answer cannot be read) is
// a *fault.Input that names the package.
func Resolve(ctx context.Context, app *toa.Application, opts ...Option) (*Result, error) {
	o := &options{node: "node", stderr: io.Discard}
	for _, opt := range opts {
		opt(o)
	}
	r := &resolver{ctx: ctx, app: app, o: o, extensions: map[string][]*toa.Component{}, packages: map[string]*inspected{},
		manifests: map[*toa.Component]*object{}}
	r.conv = &conversation{bridge: &bridge{node: o.node, root: app.Root, output: o.stderr}}
	r.conv.mask = versionMask(r.computedVersions)
	var cache *answers
	if o.cache != "" {
		cache = &answers{dir: o.cache, node: o.node, root: app.Root}
		r.conv.lookup = cache.lookup
	}
	defer r.conv.bridge.close()
	res, err := r.resolve()
	if err != nil {
		return nil, err
	}
	if r.conv.live {
		res.Started = 1
		if cache != nil {
			r.remember(cache)
		}
	}
	return res, nil
}

type resolver struct {
	ctx  context.Context
	app  *toa.Application
	o    *options
	conv *conversation

	order      []string // the extensions, in the order Toa meets them
	extensions map[string][]*toa.Component
	packages   map[string]*inspected
	extracted  []*toa.Component
	loaded     []*toa.Component // the extensions' components, as they are read
	// manifests are the components' extension sections as the packages' manifest() left them
	manifests map[*toa.Component]*object
	dirs      []string // the folders of the packages the answers came from
}

// remember stores this run's conversation in the cache, with the folders of the packages it
// read and of what they depend on. It is done after the work, and a failure only costs the next
// run a node process.
func (r *resolver) remember(cache *answers) {
	req, err := json.Marshal(map[string]any{"op": "closure", "root": r.app.Root, "dirs": r.dirs})
	if err != nil {
		return
	}
	line, err := r.conv.bridge.exchange(r.ctx, req)
	if err != nil {
		return
	}
	var answer struct {
		Dirs []string `json:"dirs"`
	}
	if json.Unmarshal(line, &answer) != nil || len(answer.Dirs) == 0 {
		return
	}
	cache.store(r.conv.recorded, answer.Dirs)
}

// computedVersions are the versions Toa computes from the components' files (not declared in
// their manifests), of the application's components and of those the extensions brought so far.
func (r *resolver) computedVersions() []string {
	var out []string
	for _, c := range append(append([]*toa.Component(nil), r.app.Components...), r.loaded...) {
		if !c.VersionDeclared && c.Version != "" {
			out = append(out, c.Version)
		}
	}
	return out
}

func (r *resolver) addDir(dir string) {
	if dir != "" && !slices.Contains(r.dirs, dir) {
		r.dirs = append(r.dirs, dir)
	}
}

func (r *resolver) resolve() (*Result, error) {
	if len(r.app.Components) == 0 && len(r.app.Annotations) == 0 && !r.listsServices() {
		return &Result{}, nil
	}
	if err := r.checkInstalled(); err != nil {
		return nil, err
	}
	if err := r.normalize(r.app.Components); err != nil {
		return nil, err
	}
	// what the compositions list first: an extension no component names has components all the same
	var declared []string
	for _, c := range r.app.Compositions {
		for _, ref := range c.Services {
			if !slices.Contains(declared, ref) {
				declared = append(declared, ref)
			}
		}
	}
	components, err := r.extract(declared, func(ref string, err error) error {
		var e *fault.Input
		if errors.As(err, &e) {
			c := r.listing(ref)
			e.Key = "compositions"
			e.Message = fmt.Sprintf("Composition '%s' lists '%s', which cannot be resolved: %s", c, ref, e.Message)
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	if err := r.normalize(components); err != nil {
		return nil, err
	}
	from := append(append([]*toa.Component(nil), r.app.Components...), components...)
	for len(from) > 0 {
		var refs []string
		for _, c := range from {
			for _, e := range extensionsOf(c) {
				if _, seen := r.extensions[e]; !seen && !slices.Contains(refs, e) {
					refs = append(refs, e)
				}
			}
		}
		more, err := r.extract(refs, nil)
		if err != nil {
			return nil, err
		}
		if err := r.normalize(more); err != nil {
			return nil, err
		}
		components = append(components, more...)
		from = more
	}
	r.extracted = components
	all := append(append([]*toa.Component(nil), r.app.Components...), components...)
	for _, c := range all {
		for _, e := range extensionsOf(c) {
			r.extensions[e] = append(r.extensions[e], c)
		}
	}
	// references = {...connectors, ...extensions}: the connectors' keys first
	var refs []string
	users := map[string][]*toa.Component{}
	for _, c := range all {
		for _, ref := range c.References() {
			if _, seen := users[ref]; !seen {
				refs = append(refs, ref)
			}
			users[ref] = append(users[ref], c)
		}
	}
	for _, ref := range r.order {
		if _, seen := users[ref]; !seen {
			refs = append(refs, ref)
		}
		users[ref] = r.extensions[ref]
	}
	return r.deploy(refs, users, all)
}

func (r *resolver) listsServices() bool {
	for _, c := range r.app.Compositions {
		if len(c.Services) > 0 {
			return true
		}
	}
	return false
}

// listing is the first composition that lists the service.
func (r *resolver) listing(ref string) string {
	for _, c := range r.app.Compositions {
		if slices.Contains(c.Services, ref) {
			return c.Name
		}
	}
	return ""
}

// checkInstalled says what to do when nothing is installed at all.
func (r *resolver) checkInstalled() error {
	dir := filepath.Join(r.app.Root, "node_modules")
	if info, err := os.Stat(dir); err == nil && info.IsDir() {
		return nil
	}
	return &fault.Input{File: r.app.File, Message: "there is no node_modules beside it: the extensions and connectors " +
		"the application uses (" + strings.Join(r.wanted(), ", ") + ") are read from the packages installed there",
		Hint: "run `npm install` in the context's folder first, with a package.json that names @toa.io/runtime or these packages"}
}

// wanted lists what the application names, for a message.
func (r *resolver) wanted() []string {
	var out []string
	add := func(s string) {
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	for _, c := range r.app.Components {
		for _, ref := range c.References() {
			add(ref)
		}
		for _, e := range extensionsOf(c) {
			add(e)
		}
	}
	for _, c := range r.app.Compositions {
		for _, s := range c.Services {
			add(s)
		}
	}
	if len(out) > 4 {
		out = append(out[:4], "...")
	}
	return out
}

// extract is Toa's extract() for each new reference: it is an extension now, and its
// components(), where it exports one, are read as components.
func (r *resolver) extract(refs []string, wrap func(string, error) error) ([]*toa.Component, error) {
	var ask []inspectRef
	for _, ref := range refs {
		if _, seen := r.extensions[ref]; seen {
			continue
		}
		r.extensions[ref] = nil
		r.order = append(r.order, ref)
		ask = append(ask, inspectRef{Reference: ref, Annotation: r.annotation(ref)})
	}
	if len(ask) == 0 {
		return nil, nil
	}
	var answer struct {
		Packages []*inspected `json:"packages"`
	}
	if err := r.run(map[string]any{"op": "inspect", "root": r.app.Root, "references": ask}, &answer, wrap); err != nil {
		return nil, err
	}
	var out []*toa.Component
	for _, p := range answer.Packages {
		r.packages[p.Reference] = p
		r.addDir(p.Dir)
		for _, dir := range p.Components {
			c, err := toa.LoadComponent(dir)
			if err != nil {
				return nil, fmt.Errorf("%s: a component of its own: %w", p.Reference, err)
			}
			out = append(out, c)
			r.loaded = append(r.loaded, c)
		}
	}
	return out, nil
}

// annotation is the context's annotation of a package, its keys in the file's order; nil when
// the context has none.
func (r *resolver) annotation(pkg string) json.RawMessage {
	for _, a := range r.app.Annotations {
		if a.Package != pkg {
			continue
		}
		if a.Raw != nil {
			return a.Raw
		}
		data, err := json.Marshal(a.Value)
		if err != nil {
			return nil
		}
		return data
	}
	return nil
}

type inspectRef struct {
	Reference  string          `json:"reference"`
	Annotation json.RawMessage `json:"annotation,omitempty"`
}

type inspected struct {
	Reference  string   `json:"reference"`
	Name       string   `json:"name"`
	Version    string   `json:"version"`
	Dir        string   `json:"dir"`
	Components []string `json:"components"`
}

// normalize is Toa's extensions(manifest) for the components as they are read: each extension
// they use, the predefined ones first, turns its section through the manifest() it exports. What
// it returns is the section its deployment() is handed as `instance.manifest`.
func (r *resolver) normalize(components []*toa.Component) error {
	type section struct {
		Reference   string          `json:"reference"`
		Declaration json.RawMessage `json:"declaration"`
	}
	type request struct {
		ID         string    `json:"id"`
		Manifest   *object   `json:"manifest"`
		Extensions []section `json:"extensions"`
	}
	if len(components) == 0 {
		return nil
	}
	reqs := make([]request, 0, len(components))
	for _, c := range components {
		rq := request{ID: c.Locator.ID, Manifest: r.describe(c)}
		for _, ref := range extensionsOf(c) {
			decl := json.RawMessage("null")
			for _, e := range c.Extensions {
				if e.Package == ref {
					decl = rawOf(e)
				}
			}
			rq.Extensions = append(rq.Extensions, section{ref, decl})
		}
		reqs = append(reqs, rq)
	}
	var answer struct {
		Components []struct {
			ID         string `json:"id"`
			Extensions []struct {
				Reference   string          `json:"reference"`
				Declaration json.RawMessage `json:"declaration"`
			} `json:"extensions"`
		} `json:"components"`
	}
	if err := r.run(map[string]any{"op": "manifests", "root": r.app.Root, "components": reqs}, &answer, nil); err != nil {
		return err
	}
	for i, c := range answer.Components {
		sections := newObject()
		for _, e := range c.Extensions {
			sections.set(e.Reference, e.Declaration)
		}
		r.manifests[components[i]] = sections
	}
	return nil
}

func rawOf(a toa.Annotation) json.RawMessage {
	if a.Raw != nil {
		return a.Raw
	}
	data, err := json.Marshal(a.Value)
	if err != nil {
		return json.RawMessage("null")
	}
	return data
}

func (r *resolver) deploy(refs []string, users map[string][]*toa.Component, all []*toa.Component) (*Result, error) {
	type request struct {
		Reference string   `json:"reference"`
		Instances []string `json:"instances"`
	}
	components := newObject()
	for _, c := range all {
		components.set(c.Locator.ID, r.describe(c))
	}
	annotations := newObject()
	for _, a := range r.app.Annotations {
		annotations.set(a.Package, rawOf(a))
	}
	deps := make([]request, 0, len(refs))
	for _, ref := range refs {
		ids := []string{}
		for _, c := range users[ref] {
			ids = append(ids, c.Locator.ID)
		}
		deps = append(deps, request{ref, ids})
	}
	var answer struct {
		Dependencies []struct {
			inspected
			Standalone  bool            `json:"standalone"`
			Declaration json.RawMessage `json:"declaration"`
		} `json:"dependencies"`
	}
	req := map[string]any{"op": "deploy", "root": r.app.Root, "annotations": annotations, "components": components, "dependencies": deps}
	if err := r.run(req, &answer, nil); err != nil {
		return nil, err
	}
	res := &Result{Components: r.extracted}
	for _, a := range answer.Dependencies {
		r.addDir(a.Dir)
		d := &Dependency{Reference: a.Reference, Name: a.Name, Version: a.Version, Dir: a.Dir,
			Instances: users[a.Reference], Standalone: a.Standalone}
		if len(a.Declaration) > 0 && string(a.Declaration) != "null" {
			decl, err := readDeclaration(a.Declaration)
			if err != nil {
				return nil, &fault.Input{File: filepath.Join(a.Dir, "package.json"),
					Message: fmt.Sprintf("%s: deployment() returned what toa-push cannot read: %v", a.Reference, err),
					Hint:    "the package is not what Toa expects here: check its version, or report it to its authors"}
			}
			d.Declaration = decl
			res.Warnings = append(res.Warnings, charts(a.Reference, decl.References)...)
		}
		res.Dependencies = append(res.Dependencies, d)
	}
	return res, nil
}

// charts says what to do about the Helm charts a package asks to be installed with the
// application (Toa's chart dependencies): toa-push deploys none, and the rest of the application
// is deployed without them.
func charts(ref string, charts []Chart) []string {
	var out []string
	for _, c := range charts {
		from := ""
		if c.Repository != "" {
			from = " from " + c.Repository
		}
		name := c.Name
		if c.Alias != "" {
			name = c.Alias
		}
		out = append(out, fmt.Sprintf("%s asks for the Helm chart %s %s%s, which Toa installed as a dependency of the "+
			"application's chart: toa-push deploys no Helm charts, so install it yourself before toa-apply "+
			"(helm install %s %s --version %s), or deploy what it provides another way", ref, c.Name, c.Version, from,
			name, chartRef(c), c.Version))
	}
	return out
}

func chartRef(c Chart) string {
	switch {
	case c.Repository == "":
		return c.Name
	case strings.HasPrefix(c.Repository, "oci://"):
		return strings.TrimSuffix(c.Repository, "/") + "/" + c.Name
	case strings.HasPrefix(c.Repository, "@"), strings.HasPrefix(c.Repository, "alias:"):
		return strings.TrimPrefix(strings.TrimPrefix(c.Repository, "alias:"), "@") + "/" + c.Name
	}
	return c.Name + " --repo " + c.Repository
}

// predefined are the extensions Toa's norm adds to every component, before the ones its manifest
// names (runtime/norm/src/.component/extensions.js: Object.assign({}, PREDEFINED, ...)). Later
// versions add fetch, which declares nothing for a deployment, and introspection, which Toa 289
// did not have: neither is asked for here.
var predefined = []string{"@toa.io/extensions.telemetry"}

// extensionsOf are the extensions a component uses, in the order Toa's norm leaves them: the
// predefined ones, then the ones its manifest names.
func extensionsOf(c *toa.Component) []string {
	out := slices.Clone(predefined)
	for _, e := range c.Extensions {
		if !slices.Contains(out, e.Package) {
			out = append(out, e.Package)
		}
	}
	return out
}

// describe is a component as Toa's norm hands it to extensions: its manifest, in the file's key
// order, completed with its locator, its name and namespace, its version and folder, its extension
// sections (as their manifest() left them, once it has run), the storage and receivers with
// Toa's defaults in place, and the operations its code and prototype declare.
func (r *resolver) describe(c *toa.Component) *object {
	out := parseObject(c.Raw)
	out.set("name", c.Name)
	out.set("namespace", c.Namespace)
	out.set("version", c.Version)
	out.set("path", c.Path)
	out.set("locator", map[string]string{"name": c.Name, "namespace": c.Namespace, "id": c.Locator.ID,
		"label": c.Locator.Label, "uppercase": c.Locator.Uppercase})
	if sections, ok := r.manifests[c]; ok {
		out.set("extensions", sections)
	} else {
		sections := newObject()
		for _, e := range c.Extensions {
			sections.set(e.Package, rawOf(e))
		}
		out.set("extensions", sections)
	}
	if c.Storage != "" {
		raw, _ := out.get("entity")
		entity := parseObject(raw)
		entity.set("storage", c.Storage)
		out.set("entity", entity)
	}
	if len(c.Operations) > 0 {
		// Toa's norm makes every operation a declaration (`transit: ~` is {}), and adds those of
		// the component's code and prototype
		raw, _ := out.get("operations")
		ops := parseObject(raw)
		for _, name := range c.Operations {
			if v, ok := ops.get(name); !ok || string(v) == "null" {
				ops.set(name, json.RawMessage("{}"))
			}
		}
		out.set("operations", ops)
	}
	if len(c.Receivers) > 0 {
		raw, _ := out.get("receivers")
		given := parseObject(raw)
		receivers := newObject()
		for _, rc := range c.Receivers {
			v, ok := given.get(rc.Event)
			if !ok {
				v, ok = given.get(strings.TrimPrefix(rc.Event, "default."))
			}
			var op string
			switch {
			case !ok:
				receivers.set(rc.Event, json.RawMessage("{}"))
			case json.Unmarshal(v, &op) == nil:
				receivers.set(rc.Event, map[string]string{"operation": op})
			default:
				receivers.set(rc.Event, parseObject(v))
			}
		}
		out.set("receivers", receivers)
	}
	return out
}

// run asks the packages one question, and decodes the answer.
func (r *resolver) run(request any, answer any, wrap func(string, error) error) error {
	in, err := json.Marshal(request)
	if err != nil {
		return fmt.Errorf("ask the extensions: %w", err)
	}
	out, err := r.conv.ask(r.ctx, in)
	if err != nil {
		return err
	}
	var failure struct {
		Error *struct {
			Reference string `json:"reference"`
			Stage     string `json:"stage"`
			Message   string `json:"message"`
			Component string `json:"component"`
		} `json:"error"`
	}
	if err := json.Unmarshal(out, &failure); err != nil {
		return fmt.Errorf("ask the extensions what they deploy: %w", err)
	}
	if f := failure.Error; f != nil {
		err := r.failure(f.Reference, f.Stage, f.Message, f.Component)
		if wrap != nil {
			return wrap(f.Reference, err)
		}
		return err
	}
	return json.Unmarshal(out, answer)
}

func (r *resolver) failure(ref, stage, message, component string) error {
	e := &fault.Input{File: r.app.File, Message: ref + ": " + message}
	c := r.component(component)
	switch stage {
	case "missing":
		e.Message = fmt.Sprintf("'%s' is not installed in the context's node_modules", ref)
		if filepath.IsAbs(ref) {
			e.Message = fmt.Sprintf("'%s' is not a package (it has no package.json)", ref)
		}
		e.Hint = "add it to the context's package.json and run `npm install` in the context's folder"
		if users := r.users(ref); users != "" {
			e.Message += "; " + users + " use(s) it"
		}
	case "load":
		e.Hint = "reinstall it with `npm install`, or check that it is the version the application needs"
	case "manifest":
		// Toa reads a component's sections as it loads the component: the error is the manifest's
		if c != nil {
			e.File, e.Key = c.Manifest, sectionKey(c, ref)
		}
		e.Hint = "the component's section of the extension is likely what it refuses: see the extension's documentation"
	case "call":
		e.Hint = "the context's annotation of the package (or a manifest's section of it) is likely what it refuses"
	case "output":
		e.Hint = "the package is not what Toa expects here: check its version, or report it to its authors"
	}
	return e
}

// component finds a component of the context, or one an extension brought, by its id.
func (r *resolver) component(id string) *toa.Component {
	if id == "" {
		return nil
	}
	for _, c := range append(append([]*toa.Component(nil), r.app.Components...), r.loaded...) {
		if c.Locator.ID == id {
			return c
		}
	}
	return nil
}

// sectionKey is where a manifest gives an extension its section: a top-level key, or one of
// `extensions`; "" for a predefined extension it does not name.
func sectionKey(c *toa.Component, ref string) string {
	short := strings.TrimPrefix(ref, "@toa.io/extensions.")
	if _, ok := c.Values[short]; ok && short != ref {
		return short
	}
	if ext, ok := c.Values["extensions"].(map[string]any); ok {
		for _, k := range []string{ref, short} {
			if _, ok := ext[k]; ok {
				return "extensions." + k
			}
		}
	}
	return ""
}

// users names the components that use a package, for a message.
func (r *resolver) users(ref string) string {
	var ids []string
	for _, c := range append(append([]*toa.Component(nil), r.app.Components...), r.loaded...) {
		if slices.Contains(c.References(), ref) || slices.Contains(extensionsOf(c), ref) {
			ids = append(ids, c.Locator.ID)
		}
	}
	return strings.Join(ids, ", ")
}
