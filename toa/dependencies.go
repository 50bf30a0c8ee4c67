package toa

import (
	"path/filepath"
	"strings"
)

// The packages Toa uses when a manifest names none.
const (
	DefaultStorage = "@toa.io/storages.mongodb" // an entity's `storage` when it gives none
	NullStorage    = "@toa.io/storages.null"    // `storage: ~`: an entity kept nowhere
	DefaultBinding = "@toa.io/bindings.amqp"    // the binding of every operation and event that names none
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
// entity's storage, then the bindings of its operations and events. Operations declared only in
// a component's code are invisible to a deployment, so a component whose manifest names no
// binding counts as using the default ones.
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

// readConnectors reads what the manifest says of the connectors: the entity's storage, the
// bindings of operations and events, the events it emits and the receivers; and the whole
// manifest as plain values, which extensions are handed.
func (c *Component) readConnectors(m field) error {
	v, err := m.value()
	if err != nil {
		return err
	}
	c.Values, _ = v.(map[string]any)
	if err := c.readStorage(m); err != nil {
		return err
	}
	defaults := []string{DefaultBinding}
	if f, ok := m.child("bindings"); ok && !f.isNull() {
		list, err := f.strings(1, true, "list binding packages, like [amqp]")
		if err != nil {
			return err
		}
		defaults = resolveBindings(list)
	}
	var bindings []string
	add := func(b ...string) {
		for _, x := range b {
			if indexOf(bindings, x) < 0 {
				bindings = append(bindings, x)
			}
		}
	}
	if ops, ok := m.child("operations"); ok && !ops.isNull() {
		names, err := ops.mapping(nil, "`operations` maps an operation's name to its declaration")
		if err != nil {
			return err
		}
		for _, name := range names {
			c.Operations = append(c.Operations, name)
			op, _ := ops.child(name)
			b, present := op.child("bindings")
			if !present || b.isNull() {
				add(defaults...)
				continue
			}
			list, err := b.strings(1, true, "list binding packages, like [amqp]")
			if err != nil {
				return err
			}
			add(resolveBindings(list)...)
		}
	}
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
				add(defaults[0])
				continue
			}
			s, err := b.str()
			if err != nil {
				return err
			}
			add(resolveBindings([]string{s})...)
		}
	}
	if len(bindings) == 0 {
		add(defaults...)
	}
	c.Bindings = bindings
	return c.readReceivers(m)
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

func (c *Component) readReceivers(m field) error {
	rs, ok := m.child("receivers")
	if !ok || rs.isNull() {
		return nil
	}
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
	return nil
}

func resolveBindings(list []string) []string {
	out := make([]string, len(list))
	for i, b := range list {
		out[i] = resolveShortcut(b, contextShortcut)
	}
	return out
}
