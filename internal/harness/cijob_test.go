package harness

import (
	"archive/tar"
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The kubelet's log files: partial lines joined, stdout and stderr in the order written.
func TestCRILog(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"2026-12-05T23:24:33.649Z stdout F --- the job's container\n", "--- the job's container\n"},
		{"t stdout P a long \nt stdout F line\nt stderr F error: x\n", "a long line\nerror: x\n"},
		{"t stdout F \nt stdout F tab\there\n", "\ntab\there\n"},
		{"", ""},
	} {
		if got := criLog(strings.NewReader(c.in)); got != c.want {
			t.Errorf("criLog(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// The job's layer holds toa-push and the checkout, its linked packages as files.
func TestJobLayer(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"app/context.toa.yaml": "name: x\n", "pkg/index.js": "exports.x = 1\n", "bin/toa-push": "#!"})
	if err := os.MkdirAll(filepath.Join(dir, "app", "node_modules"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(dir, "pkg"), filepath.Join(dir, "app", "node_modules", "pkg")); err != nil {
		t.Fatal(err)
	}
	data, err := jobLayer(filepath.Join(dir, "bin", "toa-push"), map[string]string{"/app/native": filepath.Join(dir, "app")})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	tr := tar.NewReader(bytes.NewReader(data))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(tr)
		got[h.Name] = string(body)
		if h.Typeflag == tar.TypeSymlink {
			t.Errorf("%s is a link", h.Name)
		}
	}
	for name, want := range map[string]string{"usr/local/bin/toa-push": "#!", "app/native/context.toa.yaml": "name: x\n",
		"app/native/node_modules/pkg/index.js": "exports.x = 1\n", "app/": "", "usr/local/bin/": ""} {
		if body, ok := got[name]; !ok || body != want {
			t.Errorf("%s: %q, %v; want %q (%d entries)", name, body, ok, want, len(got))
		}
	}
}
