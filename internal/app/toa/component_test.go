package toa

import (
	"os"
	"path/filepath"
	"testing"
)

func TestLocator(t *testing.T) {
	cases := []struct{ name, namespace, id, label, upper string }{
		{"one", "dummies", "dummies.one", "dummies-one", "DUMMIES_ONE"},
		{"Stash", "default", "default.Stash", "default-stash", "DEFAULT_STASH"},
		{"echo", "", "echo", "echo", "ECHO"},
	}
	for _, c := range cases {
		l := NewLocator(c.name, c.namespace)
		if l.ID != c.id || l.Label != c.label || l.Uppercase != c.upper {
			t.Errorf("NewLocator(%q, %q) = %+v", c.name, c.namespace, l)
		}
	}
}

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func makeComponent(t *testing.T, dir string) {
	write(t, filepath.Join(dir, "manifest.toa.yaml"), "name: one\n")
	write(t, filepath.Join(dir, "index.js"), "exports.x = 1\n")
	write(t, filepath.Join(dir, "lib", "util.js"), "exports.y = 2\n")
}

func TestHashFiles(t *testing.T) {
	a := filepath.Join(t.TempDir(), "first", "dummies.one")
	b := filepath.Join(t.TempDir(), "elsewhere", "deeper", "dummies.one")
	makeComponent(t, a)
	makeComponent(t, b)
	va, err := HashFiles(a)
	if err != nil {
		t.Fatal(err)
	}
	vb, _ := HashFiles(b)
	if va != vb || len(va) != 8 {
		t.Fatalf("same files in two folders: %s and %s", va, vb)
	}

	t.Run("node_modules and .git do not count", func(t *testing.T) {
		write(t, filepath.Join(b, "node_modules", "x", "index.js"), "junk")
		write(t, filepath.Join(b, ".git", "HEAD"), "ref: main")
		write(t, filepath.Join(b, "lib", "node_modules"), "a file named node_modules")
		if v, _ := HashFiles(b); v != va {
			t.Errorf("version changed to %s with node_modules and .git", v)
		}
	})
	t.Run("a changed byte counts", func(t *testing.T) {
		write(t, filepath.Join(b, "lib", "util.js"), "exports.y = 3\n")
		if v, _ := HashFiles(b); v == va {
			t.Error("version did not change with a file's bytes")
		}
		write(t, filepath.Join(b, "lib", "util.js"), "exports.y = 2\n")
	})
	t.Run("a changed name counts", func(t *testing.T) {
		if err := os.Rename(filepath.Join(b, "lib", "util.js"), filepath.Join(b, "lib", "utils.js")); err != nil {
			t.Fatal(err)
		}
		if v, _ := HashFiles(b); v == va {
			t.Error("version did not change with a file's name")
		}
	})
}

// TestHashFilesVector pins the fold: sha256(path ‖ sha256(bytes)) over sorted paths.
func TestHashFilesVector(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "b.js"), "b")
	write(t, filepath.Join(dir, "a.js"), "a")
	got, err := HashFiles(dir)
	if err != nil {
		t.Fatal(err)
	}
	// computed independently: node -e "const c=require('crypto');const h=c.createHash('sha256');
	// for (const [p,d] of [['a.js','a'],['b.js','b']]) {h.update(p);h.update(c.createHash('sha256').update(d).digest())}
	// console.log(h.digest('hex').slice(0,8))"
	if want := "468525ff"; got != want {
		t.Errorf("HashFiles = %s, want %s", got, want)
	}
}

func TestJSOrder(t *testing.T) {
	// JavaScript sorts by UTF-16 code units: U+FF5E (one unit, 0xFF5E) after U+1F600 (0xD83D ...)
	if !jsLess("\U0001F600", "\uFF5E") {
		t.Error("astral character should sort before U+FF5E as in JavaScript")
	}
	if !jsLess("a/b.js", "a/c.js") || jsLess("b", "a") {
		t.Error("plain order broken")
	}
}

func TestDeclared(t *testing.T) {
	c := &Component{Locator: NewLocator("two", "dummies"), ModuleType: "commonjs"}
	want := "{\n  \"name\": \"dummies-two\",\n  \"private\": true,\n  \"type\": \"commonjs\"\n}\n"
	if got := string(c.Declared()); got != want {
		t.Errorf("Declared() = %q, want %q", got, want)
	}
}
