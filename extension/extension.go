// Package extension asks a Toa application's extension and connector packages what they deploy.
// In Toa each package says so itself, in JavaScript, through the deployment(instances,
// annotation) it exports, so toa-deploy does not re-implement them: a small Node program shipped
// inside the binary (node.js) loads each package from the application's node_modules, calls it
// with the values Toa passes, and hands back JSON. This room sits between toa, which reads the
// application's files and starts no process, and the packages that make images and objects of
// what the extensions declare.
package extension

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"github.com/toa-deploy/toa-deploy/fault"
	"github.com/toa-deploy/toa-deploy/toa"
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
}

// WithNode sets the node binary. Default: node on PATH.
func WithNode(path string) Option { return func(o *options) { o.node = path } }

// WithOutput sets where what the packages print goes. Default: discarded.
func WithOutput(w io.Writer) Option { return func(o *options) { o.stderr = w } }

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
	r := &resolver{ctx: ctx, app: app, o: o, extensions: map[string][]*toa.Component{}, packages: map[string]*inspected{}}
	return r.resolve()
}

type resolver struct {
	ctx context.Context
	app *toa.Application
	o   *options

	order      []string // the extensions, in the order Toa meets them
	extensions map[string][]*toa.Component
	packages   map[string]*inspected
	extracted  []*toa.Component
	loaded     []*toa.Component // the extensions' components, as they are read
}

func (r *resolver) resolve() (*Result, error) {
	if len(r.app.Components) == 0 && len(r.app.Annotations) == 0 && !r.listsServices() {
		return &Result{}, nil
	}
	if err := r.checkInstalled(); err != nil {
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
		annotation, _ := r.app.Annotation(ref)
		ask = append(ask, inspectRef{Reference: ref, Annotation: annotation})
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

type inspectRef struct {
	Reference  string `json:"reference"`
	Annotation any    `json:"annotation,omitempty"`
}

type inspected struct {
	Reference  string   `json:"reference"`
	Name       string   `json:"name"`
	Version    string   `json:"version"`
	Dir        string   `json:"dir"`
	Components []string `json:"components"`
}

func (r *resolver) deploy(refs []string, users map[string][]*toa.Component, all []*toa.Component) (*Result, error) {
	type request struct {
		Reference string   `json:"reference"`
		Instances []string `json:"instances"`
	}
	components := map[string]any{}
	for _, c := range all {
		components[c.Locator.ID] = describe(c)
	}
	annotations := map[string]any{}
	for _, a := range r.app.Annotations {
		annotations[a.Package] = a.Value
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
		}
		res.Dependencies = append(res.Dependencies, d)
	}
	return res, nil
}

// Predefined are the extensions Toa's norm adds to every component that does not name them.
// Toa adds fetch too, which declares nothing for a deployment, and later introspection, which
// Toa 289 did not have: neither is asked for here.
var Predefined = []string{"@toa.io/extensions.telemetry"}

// extensionsOf are the extensions a component uses: the ones its manifest names, then the
// predefined ones.
func extensionsOf(c *toa.Component) []string {
	var out []string
	for _, e := range c.Extensions {
		out = append(out, e.Package)
	}
	for _, p := range Predefined {
		if !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return out
}

// describe is a component as Toa's norm hands it to extensions: its manifest, its locator, and
// the connectors it uses with the defaults in place.
func describe(c *toa.Component) map[string]any {
	out := map[string]any{}
	for k, v := range c.Values {
		out[k] = v
	}
	out["name"], out["namespace"], out["version"], out["path"] = c.Name, c.Namespace, c.Version, c.Path
	out["locator"] = map[string]string{"name": c.Name, "namespace": c.Namespace, "id": c.Locator.ID,
		"label": c.Locator.Label, "uppercase": c.Locator.Uppercase}
	extensions := map[string]any{}
	for _, e := range c.Extensions {
		extensions[e.Package] = e.Value
	}
	out["extensions"] = extensions
	if c.Storage != "" {
		entity, _ := out["entity"].(map[string]any)
		copied := map[string]any{}
		for k, v := range entity {
			copied[k] = v
		}
		copied["storage"] = c.Storage
		out["entity"] = copied
	}
	if len(c.Receivers) > 0 {
		receivers := map[string]any{}
		raw, _ := out["receivers"].(map[string]any)
		for _, rc := range c.Receivers {
			m := map[string]any{}
			if given, ok := raw[rc.Event].(map[string]any); ok {
				for k, v := range given {
					m[k] = v
				}
			} else if op, ok := raw[rc.Event].(string); ok {
				m["operation"] = op
			}
			receivers[rc.Event] = m
		}
		out["receivers"] = receivers
	}
	return out
}

// run runs the program with one request, and decodes its answer.
func (r *resolver) run(request any, answer any, wrap func(string, error) error) error {
	in, err := json.Marshal(request)
	if err != nil {
		return fmt.Errorf("ask the extensions: %w", err)
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		return err
	}
	defer pr.Close()
	cmd := exec.CommandContext(r.ctx, r.o.node, "-e", program)
	cmd.Dir = r.app.Root
	cmd.Stdin = bytes.NewReader(in)
	var stderr bytes.Buffer
	cmd.Stdout = r.o.stderr
	cmd.Stderr = io.MultiWriter(r.o.stderr, &stderr)
	cmd.ExtraFiles = []*os.File{pw}
	if err := cmd.Start(); err != nil {
		pw.Close()
		if errors.Is(err, exec.ErrNotFound) {
			return fmt.Errorf("ask the extensions what they deploy: %s is not on PATH: toa-push runs node to read the application's extension packages", r.o.node)
		}
		return fmt.Errorf("ask the extensions what they deploy: %w", err)
	}
	pw.Close()
	out, readErr := io.ReadAll(pr)
	waitErr := cmd.Wait()
	if readErr != nil {
		return readErr
	}
	if waitErr != nil || len(out) == 0 {
		return fmt.Errorf("ask the extensions what they deploy: node failed (%v):\n%s", waitErr, indent(stderr.String()))
	}
	var failure struct {
		Error *struct {
			Reference string `json:"reference"`
			Stage     string `json:"stage"`
			Message   string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal(out, &failure); err != nil {
		return fmt.Errorf("ask the extensions what they deploy: %w", err)
	}
	if f := failure.Error; f != nil {
		err := r.failure(f.Reference, f.Stage, f.Message)
		if wrap != nil {
			return wrap(f.Reference, err)
		}
		return err
	}
	return json.Unmarshal(out, answer)
}

func (r *resolver) failure(ref, stage, message string) error {
	e := &fault.Input{File: r.app.File, Message: ref + ": " + message}
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
	case "call":
		e.Hint = "the context's annotation of the package (or a manifest's section of it) is likely what it refuses"
	case "output":
		e.Hint = "the package is not what Toa expects here: check its version, or report it to its authors"
	}
	return e
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

func indent(s string) string {
	s = strings.TrimRight(s, "\n")
	return "  " + strings.ReplaceAll(s, "\n", "\n  ")
}
