package toa

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// What a manifest says of its connectors, with Toa's defaults: the entity's storage (mongodb
// when it names none, storages.null for `~`, a path of its own relative to its folder), the
// bindings of operations and events (amqp when the manifest names none), the receivers.
func TestConnectors(t *testing.T) {
	for _, tc := range []struct {
		name, manifest string
		storage        string
		bindings       []string
		events         []string
		receivers      []Receiver
	}{
		{"defaults", "entity:\n  schema: {title: string}\noperations:\n  transit: ~\n", DefaultStorage, []string{DefaultBinding}, nil, nil},
		{"no operations in the manifest", "name: echo\n", "", []string{DefaultBinding}, nil, nil},
		{"storage null and a shortcut binding", "entity:\n  storage: ~\noperations:\n  a:\n    bindings: [amqp, '@acme/bindings.http']\n",
			NullStorage, []string{DefaultBinding, "@acme/bindings.http"}, nil, nil},
		{"a storage shortcut, the manifest's bindings", "entity:\n  storage: sql\nbindings: ['@acme/bindings.loop']\noperations:\n  a: ~\nevents:\n  created: {}\n  closed:\n    binding: amqp\n",
			"@toa.io/storages.sql", []string{"@acme/bindings.loop", DefaultBinding}, []string{"created", "closed"}, nil},
		{"receivers", "operations:\n  count: ~\nreceivers:\n  orders.orders.created: count\n  legacy.orders.created:\n    operation: count\n    source: legacy\n",
			"", []string{DefaultBinding}, nil, []Receiver{{Event: "orders.orders.created"}, {Event: "legacy.orders.created", Source: "legacy"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "shop.orders")
			os.MkdirAll(dir, 0o755)
			os.WriteFile(filepath.Join(dir, "manifest.toa.yaml"), []byte(tc.manifest), 0o644)
			c, err := LoadComponent(dir)
			if err != nil {
				t.Fatal(err)
			}
			if c.Storage != tc.storage || !reflect.DeepEqual(c.Bindings, tc.bindings) || !reflect.DeepEqual(c.Events, tc.events) ||
				!reflect.DeepEqual(c.Receivers, tc.receivers) {
				t.Errorf("storage %q bindings %v events %v receivers %v", c.Storage, c.Bindings, c.Events, c.Receivers)
			}
			if c.Values == nil {
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
