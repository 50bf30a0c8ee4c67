package toa

import (
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// The packages Toa uses when a manifest names none.
const (
	DefaultStorage = "@toa.io/storages.mongodb" // an entity's `storage` when it gives none
	NullStorage    = "@toa.io/storages.null"    // `storage: ~`: an entity kept nowhere
	DefaultBinding = "@toa.io/bindings.amqp"    // the binding of every operation and event that names none
	NodeBridge     = "@toa.io/bridges.node"     // the bridge of a component that names none
)

// What a component with an entity takes from Toa's prototype (@toa.io/prototype, folded in by
// runtime/norm/src/.component/collapse.js): operations, which take the component's bindings, and
// the events the prototype's node bridge declares in its events/ folder. `transit` is virtual
// there (dropped unless the component declares it). The events are those of the newest prototype
// in toa-io/toa (created, deleted, updated); 1.0.0-alpha.110 had sync in place of deleted.
var (
	prototypeOperations = []string{"assign", "ensure", "enumerate", "observe", "stream", "terminate"}
	prototypeEvents     = []string{"created", "deleted", "updated"}
)

// Receiver is a receiver of the manifest: an event it consumes, and from where.
type Receiver struct {
	Event   string // the event's label, "orders.orders.created"
	Source  string // the foreign broker it consumes from; "" for this context's own
	Binding string // the binding it names, or ""
}

// LoadComponent reads the component in folder dir, as Load reads those under components/: what
// an extension's components() names is read the same way.
func LoadComponent(dir string) (*Component, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	return loadComponent(abs)
}

// References are the connector packages the component uses, in Toa's order (connectors.js): the
// entity's storage, then the bindings of its operations and events. A component with neither
// operations nor events (in its manifest, its code or its entity's prototype) uses no binding.
func (c *Component) References() []string {
	var out []string
	if c.Storage != "" {
		out = append(out, c.Storage)
	}
	for _, b := range c.Bindings {
		if indexOf(out, b) < 0 {
			out = append(out, b)
		}
	}
	return out
}

// readConnectors reads what the manifest says of the connectors, as Toa's norm completes it: the
// entity's storage; the operations and events of the manifest, of the component's code (the node
// bridge's operations/*.js and events/*.js) and of the prototype an entity brings, with the
// bindings each takes (Toa's .normalize/operations.js and events.js); the receivers; and the
// whole manifest as plain values, which extensions are handed.
func (c *Component) readConnectors(m field) error {
	v, err := m.value()
	if err != nil {
		return err
	}
	c.Values, _ = v.(map[string]any)
	if c.Raw, err = orderedJSON(m); err != nil {
		return err
	}
	if err := c.readStorage(m); err != nil {
		return err
	}
	defaults, err := defaultBindings(m)
	if err != nil {
		return err
	}
	bridge, err := m.optStr("bridge")
	if err != nil {
		return err
	}
	code := bridge == "" || resolveShortcut(bridge, contextShortcut) == NodeBridge
	var bindings bindingList
	if err := c.readOperations(m, code, defaults, &bindings); err != nil {
		return err
	}
	// an event's binding, where it names none, is the component's first asynchronous one: amqp
	eventBinding := ""
	if len(defaults) > 0 {
		eventBinding = defaults[0]
	}
	if err := c.readEvents(m, code, eventBinding, &bindings); err != nil {
		return err
	}
	c.Bindings = bindings
	return c.readReceivers(m, code)
}

// bindingList is the component's bindings, each once, in the order they were first named.
type bindingList []string

func (l *bindingList) add(bindings ...string) {
	for _, b := range bindings {
		// "": an event of a component whose `bindings: ~` leaves it no binding to take
		if b != "" && indexOf(*l, b) < 0 {
			*l = append(*l, b)
		}
	}
}

// defaultBindings are the bindings of an operation that names none: amqp unless the component's
// `bindings` says otherwise; `bindings: ~` is none at all.
func defaultBindings(m field) ([]string, error) {
	f, ok := m.child("bindings")
	switch {
	case !ok:
		return []string{DefaultBinding}, nil
	case f.isNull():
		return nil, nil
	}
	list, err := f.strings(1, true, "list binding packages, like [amqp]")
	if err != nil {
		return nil, err
	}
	return resolveBindings(list), nil
}

// readOperations reads the operations the manifest declares (a virtual one dropped, as Toa drops
// it), then those of the node bridge's code and of the entity's prototype, and the bindings that
// expose them.
func (c *Component) readOperations(m field, code bool, defaults []string, bindings *bindingList) error {
	if ops, ok := m.child("operations"); ok && !ops.isNull() {
		names, err := ops.mapping(nil, "`operations` maps an operation's name to its declaration")
		if err != nil {
			return err
		}
		for _, name := range names {
			op, _ := ops.child(name)
			if virtual, ok := op.child("virtual"); ok && virtual.node.Value == "true" {
				continue
			}
			c.Operations = append(c.Operations, name)
			b, present := op.child("bindings")
			switch {
			case !present:
				bindings.add(defaults...)
			case b.isNull():
				// `bindings: ~`: an operation no binding exposes
			default:
				list, err := b.strings(1, true, "list binding packages, like [amqp]")
				if err != nil {
					return err
				}
				bindings.add(resolveBindings(list)...)
			}
		}
	}
	more := c.prototype(m)
	if code {
		more = append(codeNames(c.Path, "operations"), more...)
	}
	for _, name := range more {
		if indexOf(c.Operations, name) < 0 {
			c.Operations = append(c.Operations, name)
			bindings.add(defaults...)
		}
	}
	return nil
}

// readEvents reads the events the manifest declares, then those of the node bridge's code and of
// the entity's prototype, and the bindings that emit them.
func (c *Component) readEvents(m field, code bool, eventBinding string, bindings *bindingList) error {
	if evs, ok := m.child("events"); ok && !evs.isNull() {
		labels, err := evs.mapping(nil, "`events` maps an event's label to its declaration")
		if err != nil {
			return err
		}
		for _, label := range labels {
			c.Events = append(c.Events, label)
			ev, _ := evs.child(label)
			b, present := ev.child("binding")
			if !present || b.isNull() {
				bindings.add(eventBinding)
				continue
			}
			s, err := b.str()
			if err != nil {
				return err
			}
			bindings.add(resolveBindings([]string{s})...)
		}
	}
	var events []string
	if code {
		events = codeNames(c.Path, "events")
	}
	if c.prototype(m) != nil {
		events = append(events, prototypeEvents...)
	}
	for _, label := range events {
		if indexOf(c.Events, label) < 0 {
			c.Events = append(c.Events, label)
			bindings.add(eventBinding)
		}
	}
	return nil
}

// prototype is what the entity's prototype brings: its operations, or nil for a component
// without an entity or with `prototype: ~`.
func (c *Component) prototype(m field) []string {
	if c.Storage == "" {
		return nil
	}
	if p, ok := m.child("prototype"); ok && p.isNull() {
		return nil
	}
	return prototypeOperations
}

// codeNames are the names the node bridge reads from the component's code: the .js files of
// its operations/, events/ or receivers/ folder, sorted as the bridge's glob lists them.
func codeNames(dir, folder string) []string {
	entries, err := os.ReadDir(filepath.Join(dir, folder))
	if err != nil {
		return nil
	}
	var names []string
	for _, e := range entries {
		if !e.IsDir() && strings.HasSuffix(e.Name(), ".js") {
			names = append(names, strings.TrimSuffix(e.Name(), ".js"))
		}
	}
	sort.Strings(names)
	return names
}

func (c *Component) readStorage(m field) error {
	e, ok := m.child("entity")
	if !ok || e.isNull() {
		return nil
	}
	if _, err := e.mapping(nil, "`entity` declares the component's schema and storage"); err != nil {
		return err
	}
	s, present := e.child("storage")
	switch {
	case !present:
		c.Storage = DefaultStorage
	case s.isNull():
		c.Storage = NullStorage
	default:
		name, err := s.str()
		if err != nil {
			return err
		}
		if strings.HasPrefix(name, ".") {
			// a storage of the component's own, as Toa resolves it: relative to its folder
			c.Storage = filepath.Join(c.Path, name)
		} else {
			c.Storage = resolveShortcut(name, contextShortcut)
		}
	}
	return nil
}

// readReceivers reads the receivers of the manifest and of the component's code, their labels as
// Toa's .normalize/receivers.js leaves them: one of this context's events named without a
// namespace is in the namespace `default`.
func (c *Component) readReceivers(m field, code bool) error {
	rs, ok := m.child("receivers")
	if ok && !rs.isNull() {
		labels, err := rs.mapping(nil, "`receivers` maps an event's label to the operation it calls")
		if err != nil {
			return err
		}
		for _, label := range labels {
			r := Receiver{Event: label}
			f, _ := rs.child(label)
			if lookup(f.node, "source") != nil {
				if r.Source, err = f.optStr("source"); err != nil {
					return err
				}
			}
			if lookup(f.node, "binding") != nil {
				if r.Binding, err = f.optStr("binding"); err != nil {
					return err
				}
			}
			c.Receivers = append(c.Receivers, r)
		}
	}
	if code {
		for _, label := range codeNames(c.Path, "receivers") {
			if !c.receives(label) {
				c.Receivers = append(c.Receivers, Receiver{Event: label})
			}
		}
	}
	for i, r := range c.Receivers {
		if r.Source == "" && strings.Count(r.Event, ".") != 2 {
			c.Receivers[i].Event = "default." + r.Event
		}
	}
	return nil
}

func (c *Component) receives(label string) bool {
	for _, r := range c.Receivers {
		if r.Event == label {
			return true
		}
	}
	return false
}

func resolveBindings(list []string) []string {
	out := make([]string, len(list))
	for i, b := range list {
		out[i] = resolveShortcut(b, contextShortcut)
	}
	return out
}
