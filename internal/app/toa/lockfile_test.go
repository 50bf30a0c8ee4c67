package toa

import (
	"path/filepath"
	"testing"
)

// Load chooses each component's lockfile once, as npm does: npm-shrinkwrap.json over
// package-lock.json; the local packages are those the chosen one names.
func TestLockfileAsNpmChooses(t *testing.T) {
	lock := func(local string) string {
		return `{"lockfileVersion":3,"packages":{"":{"name":"orders"},"` + local + `":{"name":"x","version":"1.0.0"},` +
			`"node_modules/x":{"resolved":"` + local + `","link":true}}}`
	}
	for _, c := range []struct {
		name  string
		files map[string]string // under components/orders
		want  string            // the Lockfile's name
		local string            // the one local package, under the context
	}{
		{"none", nil, "", ""},
		{"package-lock.json", map[string]string{"package-lock.json": lock("../../vendor/old")}, "package-lock.json", "vendor/old"},
		{"npm-shrinkwrap.json", map[string]string{"npm-shrinkwrap.json": lock("../../vendor/new")}, "npm-shrinkwrap.json", "vendor/new"},
		{"both: the shrinkwrap, a stale package-lock.json unread", map[string]string{"npm-shrinkwrap.json": lock("../../vendor/new"),
			"package-lock.json": lock("../../vendor/old")}, "npm-shrinkwrap.json", "vendor/new"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			write(t, filepath.Join(dir, ContextFile), baseContext)
			component := filepath.Join(dir, "components/orders")
			write(t, filepath.Join(component, "manifest.toa.yaml"), baseManifest)
			write(t, filepath.Join(component, "package.json"), `{"name":"orders","dependencies":{"x":"1.0.0"}}`)
			for _, v := range []string{"old", "new"} {
				write(t, filepath.Join(dir, "vendor", v, "package.json"), `{"name":"x","version":"1.0.0"}`)
			}
			for name, data := range c.files {
				write(t, filepath.Join(component, name), data)
			}
			app, err := Load(dir, "")
			if err != nil {
				t.Fatal(err)
			}
			got := app.Components[0]
			want := ""
			if c.want != "" {
				want = filepath.Join(got.Path, c.want)
			}
			if got.Lockfile != want {
				t.Errorf("Lockfile %q, want %q", got.Lockfile, want)
			}
			locals, err := got.LocalPackages()
			if err != nil {
				t.Fatal(err)
			}
			var paths []string
			for _, l := range locals {
				rel, _ := filepath.Rel(realPath(t, dir), realPath(t, l.Path))
				paths = append(paths, rel)
				if l.File != want {
					t.Errorf("%s named by %s, want %s", rel, l.File, want)
				}
			}
			if c.local == "" && len(paths) != 0 || c.local != "" && (len(paths) != 1 || paths[0] != c.local) {
				t.Errorf("local packages %v, want %q", paths, c.local)
			}
		})
	}
}
