package layout

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toa-deploy/toa-deploy/internal/fault"
)

// What --oci-layout writes into: a missing or empty folder, or a layout toa-push wrote (with its
// kustomization beside the images); never a folder of the user's, nor a layout holding their
// files, which are named.
func TestCheckLayoutDir(t *testing.T) {
	layout := func(t *testing.T, extra ...string) string {
		dir := filepath.Join(t.TempDir(), "layout")
		l, err := Open(dir, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range extra {
			if strings.HasSuffix(name, "/") {
				os.MkdirAll(filepath.Join(l.Dir(), name), 0o755)
				continue
			}
			os.WriteFile(filepath.Join(l.Dir(), name), []byte("mine"), 0o644)
		}
		return dir
	}
	folder := func(t *testing.T, names ...string) string {
		dir := t.TempDir()
		for _, name := range names {
			os.WriteFile(filepath.Join(dir, name), []byte("mine"), 0o644)
		}
		return dir
	}
	for _, c := range []struct {
		name string
		dir  func(t *testing.T) string
		also []string
		want string // "" when written into
	}{
		{"missing", func(t *testing.T) string { return filepath.Join(t.TempDir(), "new") }, nil, ""},
		{"empty", func(t *testing.T) string { return t.TempDir() }, nil, ""},
		{"a layout", func(t *testing.T) string { return layout(t) }, nil, ""},
		{"a layout with its kustomization", func(t *testing.T) string { return layout(t, "kustomization/") }, []string{"kustomization"}, ""},
		{"a layout with a write left part-way", func(t *testing.T) string { return layout(t, ".partial-123", ".kustomization.new-9/") }, []string{"kustomization"}, ""},
		{"a folder of the user's", func(t *testing.T) string { return folder(t, "main.go", "go.mod") },
			nil, "is neither empty nor an OCI image layout: it has no oci-layout file, and holds go.mod, main.go"},
		{"many files", func(t *testing.T) string { return folder(t, "a", "b", "c", "d", "e") }, nil, "holds a, b, c and 2 more"},
		{"a layout with the user's files", func(t *testing.T) string { return layout(t, "notes.txt", "src/") },
			nil, "is an OCI image layout that holds files toa-push does not write there: notes.txt, src"},
		{"a kustomization folder not asked for", func(t *testing.T) string { return layout(t, "kustomization/") }, nil, "does not write there: kustomization"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := c.dir(t)
			err := CheckDir(dir, c.also...)
			switch {
			case c.want == "" && err != nil:
				t.Errorf("refused: %v", err)
			case c.want != "" && (!fault.IsInput(err) || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), filepath.Base(dir))):
				t.Errorf("got %v, want an input error naming the folder that says %q", err, c.want)
			}
		})
	}
	blobs := layout(t)
	os.RemoveAll(filepath.Join(blobs, "blobs"))
	os.WriteFile(filepath.Join(blobs, "blobs"), nil, 0o644)
	if err := CheckDir(blobs); !fault.IsInput(err) || !strings.Contains(err.Error(), "is a file, not the layout's folder of blobs") {
		t.Errorf("blobs a file: %v", err)
	}
}
