package toa

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// What a manifest says of its connectors, completed as Toa's norm completes it: the entity's
// storage (mongodb when it names none, storages.null for `~`, a path of its own relative to its
// folder); the operations and events of the manifest, of the component's code and of the
// entity's prototype, each with its bindings (amqp when the manifest names none, none for
// `bindings: ~`); no binding at all for a component with neither operations nor events; the
// receivers, labelled as Toa labels them.
func TestConnectors(t *testing.T) {
	proto := []string{"assign", "ensure", "enumerate", "observe", "stream", "terminate"}
	for _, tc := range []struct {
		name, manifest string
		code           []string // files of the component's folder
		storage        string
		bindings       []string
		operations     []string
		events         []string
		receivers      []Receiver
	}{
		{"an entity and an operation", "entity:\n  schema: {title: string}\noperations:\n  transit: ~\n", nil,
			DefaultStorage, []string{DefaultBinding}, append([]string{"transit"}, proto...), []string{"created", "deleted", "updated"}, nil},
		{"no operations, no events", "name: echo\nconfiguration:\n  greeting: hello\n", nil, "", nil, nil, nil, nil},
		{"operations in its code", "name: echo\n", []string{"operations/signal.js", "operations/get.js", "events/rang.js", "operations/notes.txt"},
			"", []string{DefaultBinding}, []string{"get", "signal"}, []string{"rang"}, nil},
		{"a bash bridge's files are not read", "bridge: '@toa.io/bridges.bash'\n", []string{"operations/get.js"}, "", nil, nil, nil, nil},
		{"storage null and a shortcut binding", "entity:\n  storage: ~\n  schema: {a: string}\noperations:\n  a:\n    bindings: [amqp, '@acme/bindings.http']\n", nil,
			NullStorage, []string{DefaultBinding, "@acme/bindings.http"}, append([]string{"a"}, proto...), []string{"created", "deleted", "updated"}, nil},
		{"a storage shortcut, the manifest's bindings", "entity:\n  storage: sql\nprototype: ~\nbindings: ['@acme/bindings.loop']\noperations:\n  a: ~\nevents:\n  created: {}\n  closed:\n    binding: amqp\n", nil,
			"@toa.io/storages.sql", []string{"@acme/bindings.loop", DefaultBinding}, []string{"a"}, []string{"created", "closed"}, nil},
		{"an operation no binding exposes, a virtual one", "operations:\n  push:\n    bindings: ~\n  shadow:\n    virtual: true\n", nil,
			"", nil, []string{"push"}, nil, nil},
		{"bindings: ~ for the whole component", "bindings: ~\noperations:\n  a: ~\n", nil, "", nil, []string{"a"}, nil, nil},
		{"bindings: ~ and an event that names none", "bindings: ~\nevents:\n  rang: {}\n", nil, "", nil, nil, []string{"rang"}, nil},
		{"receivers", "operations:\n  count: ~\nreceivers:\n  orders.orders.created: count\n  legacy.orders.created:\n    operation: count\n    source: legacy\n  pots.created: count\n",
			[]string{"receivers/identity.bans.created.js"},
			"", []string{DefaultBinding}, []string{"count"}, nil, []Receiver{{Event: "orders.orders.created"}, {Event: "legacy.orders.created", Source: "legacy"},
				{Event: "default.pots.created"}, {Event: "identity.bans.created"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "shop.orders")
			os.MkdirAll(dir, 0o755)
			os.WriteFile(filepath.Join(dir, "manifest.toa.yaml"), []byte(tc.manifest), 0o644)
			for _, f := range tc.code {
				os.MkdirAll(filepath.Join(dir, filepath.Dir(f)), 0o755)
				os.WriteFile(filepath.Join(dir, f), []byte("exports.x = () => {}\n"), 0o644)
			}
			c, err := LoadComponent(dir)
			if err != nil {
				t.Fatal(err)
			}
			if c.Storage != tc.storage || !reflect.DeepEqual(c.Bindings, tc.bindings) || !reflect.DeepEqual(c.Operations, tc.operations) ||
				!reflect.DeepEqual(c.Events, tc.events) || !reflect.DeepEqual(c.Receivers, tc.receivers) {
				t.Errorf("storage %q bindings %v operations %v events %v receivers %v", c.Storage, c.Bindings, c.Operations, c.Events, c.Receivers)
			}
			if c.Values == nil || len(c.Raw) == 0 {
				t.Error("the manifest's values are not kept")
			}
		})
	}
	dir := filepath.Join(t.TempDir(), "shop.orders")
	os.MkdirAll(dir, 0o755)
	os.WriteFile(filepath.Join(dir, "manifest.toa.yaml"), []byte("entity:\n  storage: ./storage\n"), 0o644)
	c, err := LoadComponent(dir)
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(dir, "storage"); c.Storage != want || !reflect.DeepEqual(c.References(), []string{want, DefaultBinding}) {
		t.Errorf("a storage of its own: %q, references %v", c.Storage, c.References())
	}
}

// A manifest's extension sections in the order Toa's expand() leaves them: the `extensions`
// entries named by package, then the top-level sections, then the `extensions` entries named by
// shortcut, both in the order of Toa's table; each with its value as JSON in the file's order.
func TestExtensionOrder(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "shop.orders")
	os.MkdirAll(dir, 0o755)
	os.WriteFile(filepath.Join(dir, "manifest.toa.yaml"), []byte(`state: ~
configuration:
  b: 1
  a: 2
extensions:
  storages: tmp
  '@acme/extensions.audit': {z: 1, y: 2}
  exposition:
    /: {GET: get}
origins:
  web: http://web
`), 0o644)
	c, err := LoadComponent(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range c.Extensions {
		got = append(got, e.Package+" "+string(e.Raw))
	}
	want := []string{
		`@acme/extensions.audit {"z":1,"y":2}`,
		`@toa.io/extensions.origins {"web":"http://web"}`,
		`@toa.io/extensions.configuration {"b":1,"a":2}`,
		`@toa.io/extensions.state null`,
		`@toa.io/extensions.exposition {"/":{"GET":"get"}}`,
		`@toa.io/extensions.storages "tmp"`,
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("extensions\n%v\nwant\n%v", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
