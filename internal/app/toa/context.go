package toa

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"

	"github.com/toa-deploy/toa-deploy/internal/fault"
)

const resourcesHint = "write `resources: {cpu: [request, limit], memory: [request, limit]}`, like {cpu: [100m, 1], memory: [256Mi, 1Gi]}, or `resources: null` to deploy without any"

// readResourcesField reads a `resources` value: null, or cpu and memory pairs.
func readResourcesField(f field) (*Resources, error) {
	if f.isNull() {
		return &Resources{None: true}, nil
	}
	keys, err := f.mapping([]string{"cpu", "memory"}, resourcesHint)
	if err != nil {
		return nil, err
	}
	r := &Resources{}
	for _, k := range keys {
		c, _ := f.child(k)
		pair, err := c.strings(0, false, resourcesHint)
		if err != nil {
			return nil, err
		}
		if len(pair) != 2 {
			return nil, c.fail(resourcesHint, "must be a pair [request, limit], not %d item(s)", len(pair))
		}
		p := &Pair{Request: pair[0], Limit: pair[1]}
		if k == "cpu" {
			r.CPU = p
		} else {
			r.Memory = p
		}
	}
	return r, nil
}

func optResources(parent field) (*Resources, error) {
	f, ok := parent.child("resources")
	if !ok {
		return nil, nil
	}
	return readResourcesField(f)
}

func (app *Application) readResources(ctx field) error {
	var err error
	app.Resources, err = optResources(ctx)
	return err
}

func (app *Application) readMono(ctx field) error {
	f, ok := ctx.child("mono")
	if !ok || f.isNull() {
		return nil
	}
	if _, err := f.mapping([]string{"replicas", "resources"}, ""); err != nil {
		return err
	}
	if r, present := f.child("replicas"); present {
		n, err := r.integer(1)
		if err != nil {
			return err
		}
		app.Mono.Replicas = n
	}
	var err error
	app.Mono.Resources, err = optResources(f)
	return err
}

func (app *Application) readIngress(ctx field) error {
	f, ok := ctx.child("ingress")
	if !ok || f.isNull() {
		return nil
	}
	if _, err := f.mapping([]string{"hosts", "class", "annotations", "default"}, ""); err != nil {
		return err
	}
	in := &Ingress{}
	var err error
	if h, present := f.child("hosts"); present {
		if in.Hosts, err = h.strings(1, false, "list the host names the ingress serves, like [shop.example.com]"); err != nil {
			return err
		}
	}
	if in.Class, err = f.optStr("class"); err != nil {
		return err
	}
	if d, present := f.child("default"); present {
		b, err := d.boolean()
		if err != nil {
			return err
		}
		in.Default = &b
	}
	if a, present := f.child("annotations"); present && !a.isNull() {
		keys, err := a.mapping(nil, "")
		if err != nil {
			return err
		}
		in.Annotations = map[string]string{}
		for _, k := range keys {
			v, _ := a.child(k)
			if in.Annotations[k], err = v.str(); err != nil {
				return err
			}
		}
	}
	app.Ingress = in
	return nil
}

// readAnnotations gathers `annotations` and the top-level shortcuts into one value per package,
// as Toa's expand() does; the same package given twice must not disagree.
func (app *Application) readAnnotations(ctx field) error {
	type source struct {
		value any
		raw   json.RawMessage
		where string
	}
	byPackage := map[string]source{}
	add := func(f field, pkg, where string) error {
		v, err := f.value()
		if err != nil {
			return err
		}
		prev, seen := byPackage[pkg]
		if !seen {
			raw, err := orderedJSON(f)
			if err != nil {
				return err
			}
			byPackage[pkg] = source{v, raw, where}
			app.Annotations = append(app.Annotations, Annotation{Package: pkg})
			return nil
		}
		merged, conflict := mergeValues(prev.value, v)
		if conflict != "" {
			if conflict == "its value" {
				return f.fail("keep one of them", "gives %s another value than %s does", pkg, prev.where)
			}
			return f.fail("keep one of them", "gives %s another %s than %s does", pkg, conflict, prev.where)
		}
		byPackage[pkg] = source{merged, nil, prev.where}
		return nil
	}
	if a, ok := ctx.child("annotations"); ok && !a.isNull() {
		keys, err := a.mapping(nil, "`annotations` maps a package name, or its shortcut, to its settings")
		if err != nil {
			return err
		}
		for _, k := range keys {
			f, _ := a.child(k)
			if err := add(f, resolveShortcut(k, contextShortcut), "annotations."+k); err != nil {
				return err
			}
		}
	}
	keys, _ := ctx.mapping(nil, "")
	for _, k := range keys {
		pkg, ok := contextShortcut(k)
		if !ok {
			continue
		}
		f, _ := ctx.child(k)
		if err := add(f, pkg, k); err != nil {
			return err
		}
	}
	for i := range app.Annotations {
		src := byPackage[app.Annotations[i].Package]
		app.Annotations[i].Value, app.Annotations[i].Raw = src.value, src.raw
	}
	return nil
}

// mergeValues merges two annotation values deeply. Mappings merge key by key; anything else must
// be equal. The second result names the first key where they disagree.
func mergeValues(a, b any) (any, string) {
	am, aok := a.(map[string]any)
	bm, bok := b.(map[string]any)
	if !aok || !bok {
		if reflect.DeepEqual(a, b) {
			return a, ""
		}
		return nil, "its value"
	}
	out := map[string]any{}
	for k, v := range am {
		out[k] = v
	}
	for k, v := range bm {
		prev, seen := out[k]
		if !seen {
			out[k] = v
			continue
		}
		merged, conflict := mergeValues(prev, v)
		if conflict != "" {
			if conflict == "its value" {
				return nil, "'" + k + "'"
			}
			return nil, "'" + k + "." + strings.Trim(conflict, "'") + "'"
		}
		out[k] = merged
	}
	return out, ""
}

// Annotation returns the context's annotation of a package, and whether there is one.
func (app *Application) Annotation(pkg string) (any, bool) {
	for _, a := range app.Annotations {
		if a.Package == pkg {
			return a.Value, true
		}
	}
	return nil, false
}

func (app *Application) readExtras(ctx field) error {
	if f, ok := ctx.child("atomicity"); ok {
		if _, err := f.mapping([]string{"redis", "interval"}, ""); err != nil {
			return err
		}
		r, present := f.child("redis")
		if !present {
			return f.fail("give `redis: <address>`, or a list of an odd number of them", "needs `redis`")
		}
		addresses, err := r.strings(1, true, "give `redis: <address>`, or a list of an odd number of them")
		if err != nil {
			return err
		}
		if len(addresses)%2 == 0 {
			return r.fail("a quorum needs an odd number of addresses",
				"'atomicity.redis' takes an odd number of addresses, %d given", len(addresses))
		}
		app.Atomicity = &Atomicity{Redis: addresses}
		if i, present := f.child("interval"); present {
			if app.Atomicity.Interval, err = i.integer(100); err != nil {
				return err
			}
		}
	}
	if f, ok := ctx.child("outbox"); ok {
		if _, err := f.mapping([]string{"interval", "batch", "retention"}, ""); err != nil {
			return err
		}
		app.Outbox = &Outbox{}
		for key, min := range map[string]int{"interval": 100, "batch": 1, "retention": 0} {
			c, present := f.child(key)
			if !present {
				continue
			}
			n, err := c.integer(min)
			if err != nil {
				return err
			}
			switch key {
			case "interval":
				app.Outbox.Interval = &n
			case "batch":
				app.Outbox.Batch = &n
			default:
				app.Outbox.Retention = &n
			}
		}
	}
	if f, ok := ctx.child("inbox"); ok {
		if _, err := f.mapping([]string{"retention"}, ""); err != nil {
			return err
		}
		app.Inbox = &Inbox{}
		if c, present := f.child("retention"); present {
			n, err := c.integer(1)
			if err != nil {
				return err
			}
			app.Inbox.Retention = n
		}
	}
	if f, ok := ctx.child("events"); ok {
		items, err := f.list(0, "list events like [orders.orders.created]")
		if err != nil {
			return err
		}
		for _, it := range items {
			e, err := it.pattern(eventPattern, "event", "an event is namespace.component.event, like orders.orders.created")
			if err != nil {
				return err
			}
			app.Events = append(app.Events, e)
		}
	}
	if f, ok := ctx.child("evicted"); ok {
		keys, err := f.mapping([]string{"components", "services"}, "")
		if err != nil {
			return err
		}
		if len(keys) == 0 {
			return f.fail("list `components` or `services` to leave out, or remove the key", "is empty")
		}
		app.Evicted = &Evicted{}
		if c, present := f.child("components"); present {
			items, err := c.list(1, "list components by id, like [orders.orders]")
			if err != nil {
				return err
			}
			for _, it := range items {
				id, err := it.pattern(componentIDPattern, "component id", "a component is named namespace.name, like orders.orders")
				if err != nil {
					return err
				}
				app.Evicted.Components = append(app.Evicted.Components, id)
			}
		}
		if s, present := f.child("services"); present {
			if app.Evicted.Services, err = s.strings(1, false, "list services by name, like [exposition-gateway]"); err != nil {
				return err
			}
		}
	}
	return nil
}

func (app *Application) readComponents(ctx field) error {
	dirs, err := app.componentFolders(ctx)
	if err != nil {
		return err
	}
	seen := map[string]*Component{}
	for _, dir := range dirs {
		c, err := loadComponent(dir)
		if err != nil {
			return err
		}
		if prev := seen[c.Locator.ID]; prev != nil {
			return &fault.Input{File: c.Manifest, Message: fmt.Sprintf("declares component '%s', as %s does", c.Locator.ID, fault.DisplayPath(prev.Manifest)),
				Hint: "give one of them another name or namespace"}
		}
		seen[c.Locator.ID] = c
		app.Components = append(app.Components, c)
	}
	if len(app.Components) == 0 {
		app.Warnings = append(app.Warnings, fmt.Sprintf("%s: no components found under %s",
			fault.DisplayPath(app.File), fault.DisplayPath(filepath.Join(app.Root, "components"))))
	}
	return nil
}

// componentFolders lists the components' folders: components/* as Toa 289 globs them, or, for a
// context that still names `packages`, that glob with a warning.
func (app *Application) componentFolders(ctx field) ([]string, error) {
	pattern := "components/*"
	legacy := false
	if f, ok := ctx.child("packages"); ok {
		p, err := f.str()
		if err != nil {
			return nil, err
		}
		pattern, legacy = p, true
		app.Warnings = append(app.Warnings, fmt.Sprintf(
			"%s:%d: packages: is deprecated: Toa 289 reads components/* and refuses this key; move the components under components/ and remove it",
			fault.DisplayPath(app.File), lineOf(ctx, "packages")))
	}
	matches, err := filepath.Glob(filepath.Join(app.Root, filepath.FromSlash(pattern)))
	if err != nil {
		f, _ := ctx.child("packages")
		return nil, f.fail("write a glob like components/*", "'%s' is not a valid pattern", pattern)
	}
	sort.Strings(matches)
	var dirs []string
	for _, m := range matches {
		info, err := os.Stat(m)
		if err != nil || !info.IsDir() {
			continue
		}
		base := filepath.Base(m)
		if base == "node_modules" || strings.HasPrefix(base, ".") {
			continue
		}
		if legacy {
			// an old glob like '*' also matches folders that are not components
			if _, err := os.Stat(filepath.Join(m, "manifest.toa.yaml")); err != nil {
				continue
			}
		}
		dirs = append(dirs, m)
	}
	return dirs, nil
}

func (app *Application) readCompositions(ctx field) error {
	f, ok := ctx.child("compositions")
	if ok {
		items, err := f.list(1, "list compositions, like [{name: edge, components: [orders.orders]}], or remove the key to give each component its own")
		if err != nil {
			return err
		}
		for _, it := range items {
			c, err := app.readComposition(it)
			if err != nil {
				return err
			}
			if app.Composition(c.Name) != nil {
				n, _ := it.child("name")
				return n.fail("give each composition its own name", "Duplicate composition name '%s'", c.Name)
			}
			app.Compositions = append(app.Compositions, c)
		}
	}
	composed := map[string]bool{}
	for _, c := range app.Compositions {
		for _, m := range c.Components {
			composed[m.Locator.ID] = true
		}
	}
	for _, c := range app.Components {
		if composed[c.Locator.ID] {
			continue
		}
		app.Compositions = append(app.Compositions, &Composition{Name: c.Locator.Label, Components: []*Component{c}})
	}
	return nil
}

const compositionNameHint = "a composition name is a letter followed by up to 31 letters or digits, like 'edge'"

func (app *Application) readComposition(f field) (*Composition, error) {
	if _, err := f.mapping([]string{"name", "image", "components", "services", "resources"}, ""); err != nil {
		return nil, err
	}
	n, ok := f.child("name")
	if !ok {
		return nil, f.fail("give it a `name`, like `name: edge`", "a composition needs a name")
	}
	name, err := n.pattern(compositionNamePattern, "composition name", compositionNameHint)
	if err != nil {
		return nil, err
	}
	c := &Composition{Name: name, Declared: true}
	if c.Image, err = f.optImage("image"); err != nil {
		return nil, err
	}
	members, ok := f.child("components")
	if !ok {
		return nil, f.fail("list its components by id, like `components: [orders.orders]`",
			"Composition '%s' lists no components", name)
	}
	items, err := members.list(1, "list its components by id, like [orders.orders]")
	if err != nil {
		return nil, err
	}
	for _, it := range items {
		id, err := it.pattern(componentIDPattern, "component id", "a component is named namespace.name, like orders.orders")
		if err != nil {
			return nil, err
		}
		component := app.Component(id)
		if component == nil {
			return nil, it.fail("components of this context: "+strings.Join(app.componentIDs(), ", "),
				"Composition '%s' lists an unknown component '%s'.", name, id)
		}
		for _, prev := range c.Components {
			if prev == component {
				return nil, it.fail("list each component once", "Composition '%s' lists '%s' twice", name, id)
			}
		}
		c.Components = append(c.Components, component)
	}
	if s, present := f.child("services"); present {
		services, err := s.strings(1, false, "list the extensions whose services run in this composition's pod, like [exposition]")
		if err != nil {
			return nil, err
		}
		for _, svc := range services {
			c.Services = append(c.Services, resolveShortcut(svc, contextShortcut))
		}
	}
	if c.Resources, err = optResources(f); err != nil {
		return nil, err
	}
	return c, nil
}

func (app *Application) componentIDs() []string {
	ids := make([]string, len(app.Components))
	for i, c := range app.Components {
		ids[i] = c.Locator.ID
	}
	return ids
}

// evict leaves out what `evicted` names: the components, and the compositions left empty.
func (app *Application) evict(ctx field) error {
	if app.Evicted == nil || len(app.Evicted.Components) == 0 {
		return nil
	}
	out := map[*Component]bool{}
	f, _ := ctx.child("evicted")
	list, _ := f.child("components")
	for i, id := range app.Evicted.Components {
		c := app.Component(id)
		if c == nil {
			return list.item(i).fail("components of this context: "+strings.Join(app.componentIDs(), ", "),
				"'%s' is not a component of this context", id)
		}
		out[c] = true
	}
	var components []*Component
	for _, c := range app.Components {
		if !out[c] {
			components = append(components, c)
		}
	}
	app.Components = components
	var compositions []*Composition
	for _, c := range app.Compositions {
		var kept []*Component
		for _, m := range c.Components {
			if !out[m] {
				kept = append(kept, m)
			}
		}
		if len(kept) > 0 {
			c.Components = kept
			compositions = append(compositions, c)
		}
	}
	app.Compositions = compositions
	return nil
}
