package fsys

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func names(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out
}

func TestWriteFileWholeOrNothing(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "sub", "entry.json")
	if err := WriteFile(path, []byte("one"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(path, []byte("two"), 0o644); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil || string(data) != "two" {
		t.Fatalf("read back %q, %v", data, err)
	}
	if info, _ := os.Stat(path); info.Mode().Perm() != 0o644 {
		t.Errorf("mode %v, want 0644", info.Mode().Perm())
	}
	if got := names(t, filepath.Join(dir, "sub")); !slices.Equal(got, []string{"entry.json"}) {
		t.Errorf("left beside it: %v", got)
	}

	// a write that stops before Commit leaves the old file and no partial one
	p, err := Create(filepath.Join(dir, "sub"), 0o644)
	if err != nil {
		t.Fatal(err)
	}
	p.Write([]byte("half"))
	p.Discard()
	p.Discard() // twice is harmless
	if got := names(t, filepath.Join(dir, "sub")); !slices.Equal(got, []string{"entry.json"}) {
		t.Errorf("a discarded write left %v", got)
	}
	if err := p.Commit(path); err == nil {
		t.Error("Commit after Discard succeeded")
	}
}

func TestReplaceDir(t *testing.T) {
	parent := t.TempDir()
	dir := filepath.Join(parent, "deployment")
	write := func(names ...string) func(string) error {
		return func(tmp string) error {
			for _, n := range names {
				if err := os.WriteFile(filepath.Join(tmp, n), []byte(n), 0o644); err != nil {
					return err
				}
			}
			return nil
		}
	}
	if err := ReplaceDir(dir, 0o755, write("a.yaml")); err != nil {
		t.Fatal(err)
	}
	if err := ReplaceDir(dir, 0o755, write("b.yaml", "c.yaml")); err != nil {
		t.Fatal(err)
	}
	if got := names(t, dir); !slices.Equal(got, []string{"b.yaml", "c.yaml"}) {
		t.Errorf("after a replace: %v", got)
	}
	failed := errors.New("stopped")
	if err := ReplaceDir(dir, 0o755, func(tmp string) error { write("d.yaml")(tmp); return failed }); !errors.Is(err, failed) {
		t.Fatalf("a fill that fails: %v", err)
	}
	if got := names(t, dir); !slices.Equal(got, []string{"b.yaml", "c.yaml"}) {
		t.Errorf("a failed replace changed the folder: %v", got)
	}
	if got := names(t, parent); !slices.Equal(got, []string{"deployment"}) {
		t.Errorf("left beside the folder: %v", got)
	}
}
