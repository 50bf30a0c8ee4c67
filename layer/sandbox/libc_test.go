package sandbox

import (
	"os"
	"path/filepath"
	"testing"
)

// TestLibc: musl where its loader is in /lib or /usr/lib, however /lib leads there, and only
// inside the root; glibc otherwise.
func TestLibc(t *testing.T) {
	outside := t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "ld-musl-x86_64.so.1"), nil, 0o755); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name  string
		files []string          // made empty, with their folders
		links map[string]string // name → target
		want  string
	}{
		{"alpine", []string{"lib/ld-musl-x86_64.so.1"}, nil, "musl"},
		{"merged /usr, a relative link", []string{"usr/lib/ld-musl-aarch64.so.1"}, map[string]string{"lib": "usr/lib"}, "musl"},
		{"merged /usr, an absolute link", []string{"usr/lib/ld-musl-aarch64.so.1"}, map[string]string{"lib": "/usr/lib"}, "musl"},
		{"a link out of the root", []string{"usr/bin/node"}, map[string]string{"lib": outside}, "glibc"},
		{"debian", []string{"lib/x86_64-linux-gnu/libc.so.6", "lib64/ld-linux-x86-64.so.2"}, nil, "glibc"},
		{"a musl loader elsewhere", []string{"opt/cross/lib/x/ld-musl-x86_64.so.1"}, nil, "glibc"},
		{"no /lib", []string{"bin/sh"}, nil, "glibc"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			root := t.TempDir()
			for _, f := range c.files {
				p := filepath.Join(root, f)
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, nil, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			for name, target := range c.links {
				if err := os.Symlink(target, filepath.Join(root, name)); err != nil {
					t.Fatal(err)
				}
			}
			got, err := Libc(root)
			if err != nil || got != c.want {
				t.Errorf("Libc = %q, %v; want %q", got, err, c.want)
			}
		})
	}
}

func TestIsMuslLoader(t *testing.T) {
	for name, want := range map[string]bool{
		"lib/ld-musl-x86_64.so.1":      true,
		"./lib/ld-musl-aarch64.so.1":   true,
		"/usr/lib/ld-musl-armhf.so.1":  true,
		"lib/libc.musl-x86_64.so.1":    false,
		"usr/local/lib/ld-musl-x.so.1": false,
		"lib64/ld-linux-x86-64.so.2":   false,
	} {
		if got := IsMuslLoader(name); got != want {
			t.Errorf("IsMuslLoader(%q) = %v, want %v", name, got, want)
		}
	}
}
