package fsys

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestPruneLeavesHeldFolders: a folder entry held (by another run: flock conflicts between open
// files, in one process or two) is kept by Prune, and removed once let go; Hold of a folder a
// prune removed says ErrGone.
func TestPruneLeavesHeldFolders(t *testing.T) {
	root := t.TempDir()
	entry := filepath.Join(BaseRoots.Dir(root), "sha256-aa")
	if err := os.MkdirAll(filepath.Join(entry, "root", "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(entry, FolderSizeFile), []byte("4096"), 0o644)
	old := time.Now().Add(-48 * time.Hour)
	os.Chtimes(entry, old, old)

	holds := NewHolds()
	if err := holds.Hold(entry); err != nil {
		t.Fatal(err)
	}
	if err := holds.Hold(entry); err != nil { // once per folder
		t.Fatal(err)
	}
	report, err := Prune(t.Context(), root, 0, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(entry); err != nil || len(report.Removed) != 0 || report.Kept != 1 {
		t.Errorf("a held folder: %v, report %+v", err, report)
	}
	holds.Release()
	report, err = Prune(t.Context(), root, 0, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(entry); err == nil || len(report.Removed) != 1 {
		t.Errorf("a folder let go is still there: report %+v", report)
	}
	if err := NewHolds().Hold(entry); !errors.Is(err, ErrGone) {
		t.Errorf("Hold of a removed folder: %v, want ErrGone", err)
	}
	var none *Holds
	if err := none.Hold(entry); err != nil {
		t.Errorf("a nil Holds: %v", err)
	}
	none.Release()
}
