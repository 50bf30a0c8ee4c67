package toa

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/toa-deploy/toa-deploy/internal/fault"
	"github.com/toa-deploy/toa-deploy/internal/fsys"
)

const (
	baseContext  = "name: shop\nruntime: 1.0.0-alpha.289\nregistry: localhost:5000\n"
	baseManifest = "name: orders\nnamespace: shop\n"
)

// TestFilesThatAreNotFiles loads contexts in which one of the files Toa reads is a named pipe, a
// device, a folder or too large: each is refused at once, by name. The cases that git can hold
// (a link to /dev/zero) are in testdata/broken and run through toa-push.
func TestFilesThatAreNotFiles(t *testing.T) {
	fifo := func(t *testing.T, path string) {
		if err := syscall.Mkfifo(path, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	const regular = "\n  toa-deploy reads only regular files: put the file itself here"
	cases := []struct {
		name  string
		setup func(t *testing.T, dir string)
		want  string
	}{
		{"context.toa.yaml is a FIFO", func(t *testing.T, dir string) {
			os.Remove(filepath.Join(dir, ContextFile))
			fifo(t, filepath.Join(dir, ContextFile))
		}, "context.toa.yaml: is a named pipe (FIFO), not a regular file" + regular},
		{"manifest.toa.yaml is a FIFO", func(t *testing.T, dir string) {
			os.Remove(filepath.Join(dir, "components/orders/manifest.toa.yaml"))
			fifo(t, filepath.Join(dir, "components/orders/manifest.toa.yaml"))
		}, "components/orders/manifest.toa.yaml: is a named pipe (FIFO), not a regular file" + regular},
		{"package.json is a FIFO", func(t *testing.T, dir string) {
			fifo(t, filepath.Join(dir, "components/orders/package.json"))
		}, "components/orders/package.json: is a named pipe (FIFO), not a regular file" + regular},
		{"package-lock.json is a FIFO", func(t *testing.T, dir string) {
			write(t, filepath.Join(dir, "components/orders/package.json"), `{"name":"orders"}`)
			fifo(t, filepath.Join(dir, "components/orders/package-lock.json"))
		}, "components/orders/package-lock.json: is a named pipe (FIFO), not a regular file" + regular},
		{"npm-shrinkwrap.json is a FIFO", func(t *testing.T, dir string) {
			fifo(t, filepath.Join(dir, "components/orders/npm-shrinkwrap.json"))
		}, "components/orders/npm-shrinkwrap.json: is a named pipe (FIFO), not a regular file" + regular},
		{"the context's .npmrc is a FIFO", func(t *testing.T, dir string) {
			fifo(t, filepath.Join(dir, ".npmrc"))
		}, ".npmrc: is a named pipe (FIFO), not a regular file" + regular},
		{"a component's .npmrc links to a FIFO", func(t *testing.T, dir string) {
			fifo(t, filepath.Join(dir, "pipe"))
			if err := os.Symlink("../../pipe", filepath.Join(dir, "components/orders/.npmrc")); err != nil {
				t.Fatal(err)
			}
		}, "components/orders/.npmrc: links to " + "<dir>/pipe, which is a named pipe (FIFO), not a regular file" + regular},
		{"the installed runtime's package.json is a FIFO", func(t *testing.T, dir string) {
			write(t, filepath.Join(dir, ContextFile), "name: shop\nregistry: localhost:5000\n")
			if err := os.MkdirAll(filepath.Join(dir, "node_modules/@toa.io/runtime"), 0o755); err != nil {
				t.Fatal(err)
			}
			fifo(t, filepath.Join(dir, "node_modules/@toa.io/runtime/package.json"))
		}, "node_modules/@toa.io/runtime/package.json: is a named pipe (FIFO), not a regular file" + regular},
		{"package.json links to /dev/zero", func(t *testing.T, dir string) {
			if err := os.Symlink("/dev/zero", filepath.Join(dir, "components/orders/package.json")); err != nil {
				t.Fatal(err)
			}
		}, "components/orders/package.json: links to /dev/zero, which is a device, not a regular file" + regular},
		{"manifest.toa.yaml is a folder", func(t *testing.T, dir string) {
			os.Remove(filepath.Join(dir, "components/orders/manifest.toa.yaml"))
			if err := os.Mkdir(filepath.Join(dir, "components/orders/manifest.toa.yaml"), 0o755); err != nil {
				t.Fatal(err)
			}
		}, "components/orders/manifest.toa.yaml: is a folder, not a regular file" + regular},
		{"context.toa.yaml is over the limit", func(t *testing.T, dir string) {
			write(t, filepath.Join(dir, ContextFile), baseContext+"description: "+strings.Repeat("x", fsys.MaxYAMLSize)+"\n")
		}, "context.toa.yaml: is 1048651 bytes, more than the 1 MiB toa-deploy reads of a context.toa.yaml\n  check that this is the file you meant"},
		{"package-lock.json is over the limit", func(t *testing.T, dir string) {
			// a sparse file: its size is what is checked, nothing is read
			f, err := os.Create(filepath.Join(dir, "components/orders/package-lock.json"))
			if err != nil {
				t.Fatal(err)
			}
			if err := f.Truncate(5 << 30); err != nil {
				t.Fatal(err)
			}
			f.Close()
		}, "components/orders/package-lock.json: is 5 GiB, more than the 64 MiB toa-deploy reads of a package-lock.json\n  check that this is the file you meant"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			write(t, filepath.Join(dir, ContextFile), baseContext)
			write(t, filepath.Join(dir, "components/orders/manifest.toa.yaml"), baseManifest)
			c.setup(t, dir)
			t.Chdir(dir)
			err := loadWithin(t, 10*time.Second)
			want := strings.ReplaceAll(c.want, "<dir>", realPath(t, dir))
			if !fault.IsInput(err) || err.Error() != want {
				t.Errorf("got %v\nwant %s", err, want)
			}
		})
	}
}

// loadWithin loads the context in the current folder, failing the test instead of hanging when
// Load does not return in time.
func loadWithin(t *testing.T, limit time.Duration) error {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		_, err := Load(".", "")
		done <- err
	}()
	select {
	case err := <-done:
		return err
	case <-time.After(limit):
		t.Fatalf("Load did not return within %s", limit)
		return nil
	}
}

func realPath(t *testing.T, dir string) string {
	t.Helper()
	p, err := filepath.EvalSymlinks(dir)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestMessagesOfTheFuzzer holds what a fuzzer over contexts and manifests found worst (issue 14,
// item 5), each with the exact message: the file, the line and the key, in plain words. The same
// cases, run through toa-push, are in testdata/broken.
func TestMessagesOfTheFuzzer(t *testing.T) {
	cases := []struct {
		name, context, manifest, want string
	}{
		{"infinity in a manifest", baseContext, baseManifest + "operations:\n  get:\n    input: .inf\n",
			"components/orders/manifest.toa.yaml:5: operations.get.input: '.inf' is infinity, which a JSON value cannot hold\n  write a number, or quote it ('.inf') if you mean the text"},
		{"negative infinity in an annotation", baseContext + "exposition:\n  limit: -.Inf\n", baseManifest,
			"context.toa.yaml:5: exposition.limit: '-.Inf' is infinity, which a JSON value cannot hold\n  write a number, or quote it ('-.Inf') if you mean the text"},
		{"not a number in a list", baseContext + "exposition:\n  limits: [1, .NaN]\n", baseManifest,
			"context.toa.yaml:5: exposition.limits[1]: '.NaN' is not a number, which a JSON value cannot hold\n  write a number, or quote it ('.NaN') if you mean the text"},
		{"a duplicate key at the top", baseContext + "name: other\n", baseManifest,
			"context.toa.yaml:4: name: is given twice, first at line 1\n  remove one of the two: a mapping holds each key once"},
		{"a duplicate key in a list's mapping", baseContext + "compositions:\n  - name: a\n    components: [shop.orders]\n    name: b\n", baseManifest,
			"context.toa.yaml:7: compositions[0].name: is given twice, first at line 5\n  remove one of the two: a mapping holds each key once"},
		{"a duplicate key under an override", baseContext + "exposition@dev:\n  class: a\n  class: b\n", baseManifest,
			"context.toa.yaml:6: exposition@dev.class: is given twice, first at line 5\n  remove one of the two: a mapping holds each key once"},
		{"invalid UTF-8 in a manifest", baseContext, baseManifest + "version: \"1\xff\"\n",
			"components/orders/manifest.toa.yaml:3: is not valid UTF-8: byte 0xff at column 12\n  save the file as UTF-8: Toa reads its files as UTF-8"},
		{"a NUL byte", baseContext + "description: a\x00b\n", baseManifest,
			"context.toa.yaml:4: holds the control character \\x00 at column 15, which YAML does not allow in a file\n  remove it, or write it as an escape in a double-quoted string (\"\\e\" for ESC)"},
		{"a C1 control character", baseContext + "description: a\u009bb\n", baseManifest,
			"context.toa.yaml:4: holds the control character \\x9b at column 15, which YAML does not allow in a file\n  remove it, or write it as an escape in a double-quoted string (\"\\e\" for ESC)"},
		{"an escaped control character in a value", "name: \"shop\\e]0;owned\\a\"\nruntime: 1.0.0-alpha.289\nregistry: localhost:5000\n", baseManifest,
			"context.toa.yaml:1: name: 'shop\\x1b]0;owned\\x07' is not a valid context name\n  a context name is words of letters, digits and underscores joined by hyphens, starting with a letter, like 'online-shop'"},
		{"a line break in a registry", "name: shop\nruntime: 1.0.0-alpha.289\nregistry: \"localhost:5000\\nerror: forged\"\n", baseManifest,
			"context.toa.yaml:3: registry: 'localhost:5000\\nerror: forged' is not a valid registry to push to\n  " + registryBaseHint},
		{"an escaped control character in a key", "name: shop\nruntime: 1.0.0-alpha.289\nregistry:\n  base: localhost:5000\n  \"plat\\u202Eforms\": []\n", baseManifest,
			"context.toa.yaml:5: registry.plat\\u202eforms: is not a known key\n  allowed keys of 'registry': base, build, credentials, platforms, services"},
		{"a space in registry.base", "name: shop\nruntime: 1.0.0-alpha.289\nregistry:\n  base: \"a b\"\n", baseManifest,
			"context.toa.yaml:4: registry.base: 'a b' is not a valid registry to push to\n  " + registryBaseHint},
		{"a tag in registry.base", "name: shop\nruntime: 1.0.0-alpha.289\nregistry:\n  base: localhost:5000/acme:1\n", baseManifest,
			"context.toa.yaml:4: registry.base: 'localhost:5000/acme:1' is not a valid registry to push to\n  " + registryBaseHint},
		{"a scheme in registry", "name: shop\nruntime: 1.0.0-alpha.289\nregistry: http://localhost:5000\n", baseManifest,
			"context.toa.yaml:3: registry: 'http://localhost:5000' is not a valid registry to push to\n  " + registryBaseHint},
		{"an invalid registry under an override", baseContext + "registry@dev: \"-x\"\n", baseManifest, ""},
		{"an invalid registry.build.image", "name: shop\nruntime: 1.0.0-alpha.289\nregistry:\n  base: localhost:5000\n  build:\n    image: node@sha256:abc\n", baseManifest,
			"context.toa.yaml:6: registry.build.image: 'node@sha256:abc' is not a valid image reference\n  " + imageHint},
		{"an alias bomb in a manifest", baseContext, baseManifest + bomb(9),
			"components/orders/manifest.toa.yaml: holds more than 100000 values once its aliases are expanded\n  each alias (*name) is a copy of what its anchor (&name) names, and aliases of aliases multiply: write fewer of them"},
		{"too many values without an alias", baseContext + "exposition:\n  x: [" + strings.Repeat("1,", maxNodes) + "]\n", baseManifest,
			"context.toa.yaml: holds more than 100000 values\n  a Toa file holds some hundreds: check that this is the file you meant"},
		{"a merge that refers to itself", baseContext + "exposition: &e\n  <<: *e\n", baseManifest,
			"context.toa.yaml:5: the alias *e is inside the value it names\n  an alias cannot name a value that contains it: such a value never ends"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			write(t, filepath.Join(dir, ContextFile), c.context)
			write(t, filepath.Join(dir, "components/orders/manifest.toa.yaml"), c.manifest)
			t.Chdir(dir)
			err := loadWithin(t, 10*time.Second)
			if c.want == "" {
				if err != nil {
					t.Errorf("an override of another environment is not read: %v", err)
				}
				return
			}
			if !fault.IsInput(err) || err.Error() != c.want {
				t.Errorf("got %v\nwant %s", err, c.want)
			}
		})
	}
}

// bomb is a YAML alias bomb ("billion laughs") of n anchor lines, each a list of nine aliases of
// the line above: 9^n values once expanded.
func bomb(n int) string {
	var b strings.Builder
	b.WriteString("anchors:\n  l0: &l0 [x, x, x, x, x, x, x, x, x]\n")
	for i := 1; i < n; i++ {
		prev := "*l" + string(rune('0'+i-1))
		b.WriteString("  l" + string(rune('0'+i)) + ": &l" + string(rune('0'+i)) + " [")
		for j := 0; j < 9; j++ {
			if j > 0 {
				b.WriteString(", ")
			}
			b.WriteString(prev)
		}
		b.WriteString("]\n")
	}
	return b.String()
}

// TestSyntaxErrorLines checks the line of YAML syntax errors: the library gives the line where the
// block around the mistake starts, and for its parser's errors one less; ours is the mistake's.
func TestSyntaxErrorLines(t *testing.T) {
	const indentation = "\n  check the indentation of this line and of the one above it"
	cases := []struct{ yaml, want string }{
		{"a: 1\nx:\n  - a\n  b: c\n", "f.yaml:4: is not valid YAML: did not find expected '-' indicator" + indentation},
		{"a: 1\nb:\n  c: 1\n d: 2\n", "f.yaml:4: is not valid YAML: did not find expected key" + indentation},
		{"a: 1\nb: &x &y z\n", "f.yaml:2: is not valid YAML: did not find expected key" + indentation},
		{"a: 1\nb:\n  c: 1\n  d: *nope\n", "f.yaml:4: is not valid YAML: the alias *nope names no anchor\n  write the anchor (&nope) on the value it names, above this line"},
		{"a: 1\nb:\n\tc: 1\n", "f.yaml:3: is not valid YAML: found character that cannot start any token\n  indent with spaces: YAML does not allow tabs in indentation"},
		{"a: 1\nb: \"x\\qy\"\n", "f.yaml:2: is not valid YAML: found unknown escape character\n  in double quotes a backslash starts an escape: write \\\\ for a backslash, or use single quotes"},
		{"a: 1\nb: 'x\n", "f.yaml:2: is not valid YAML: found unexpected end of stream\n  a quote or a bracket opened on this line is not closed"},
	}
	// The same mistakes deep in a file near the 1 MiB limit: the line is still the mistake's.
	var long strings.Builder
	long.WriteString("a:\n")
	for i := 0; long.Len() < 900<<10; i++ {
		fmt.Fprintf(&long, "  key%d: a value of some length, number %d\n", i, i)
	}
	lines := strings.Count(long.String(), "\n")
	cases = append(cases,
		struct{ yaml, want string }{long.String() + "  bad: [open\nafter: 1\n",
			fmt.Sprintf("f.yaml:%d: is not valid YAML: did not find expected ',' or ']'", lines+1) + indentation},
		struct{ yaml, want string }{long.String() + " d: 2\n",
			fmt.Sprintf("f.yaml:%d: is not valid YAML: did not find expected key", lines+1) + indentation})
	for _, c := range cases {
		start := time.Now()
		_, err := parseYAML("f.yaml", []byte(c.yaml))
		if err == nil || err.Error() != c.want {
			t.Errorf("%.40q:\ngot  %v\nwant %s", c.yaml, err, c.want)
		}
		if took := time.Since(start); took > 5*time.Second {
			t.Errorf("%.40q: took %s", c.yaml, took)
		}
	}
}
