package fsys

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/toa-deploy/toa-deploy/internal/fault"
)

func TestReadFileLimits(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "package.json")
	if err := os.WriteFile(p, []byte("12345"), 0o644); err != nil {
		t.Fatal(err)
	}
	if data, err := ReadFile(p, 5); err != nil || string(data) != "12345" {
		t.Errorf("a file of exactly the limit: %q %v", data, err)
	}
	if _, err := ReadFile(p, 4); !fault.IsInput(err) || !strings.HasSuffix(strings.Split(err.Error(), "\n")[0], "is 5 bytes, more than the 4 bytes toa-deploy reads of a package.json") {
		t.Errorf("over the limit: %v", err)
	}
	if _, err := ReadFile(filepath.Join(dir, "absent"), 5); !errors.Is(err, os.ErrNotExist) || fault.IsInput(err) {
		t.Errorf("a missing file is not bad input but missing: %v", err)
	}
	for n, want := range map[int64]string{1023: "1023 bytes", 1024: "1 KiB", 1536: "1.5 KiB", 1 << 20: "1 MiB", 1<<20 + 1: "1048577 bytes", 5 << 30: "5 GiB"} {
		if got := BytesText(n); got != want {
			t.Errorf("BytesText(%d) = %q, want %q", n, got, want)
		}
	}
}

// TestOpenRefusesWhatIsNotAFile: a named pipe, a link to a device and a folder are refused at
// once, by name and by what they are, without a read that would block or never end.
func TestOpenRefusesWhatIsNotAFile(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	zero := filepath.Join(dir, "zero")
	if err := os.Symlink("/dev/zero", zero); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ path, want string }{
		{fifo, "is a named pipe (FIFO), not a regular file"},
		{zero, "links to /dev/zero, which is a device, not a regular file"},
		{dir, "is a folder, not a regular file"},
	} {
		start := time.Now()
		f, err := Open(c.path, 1<<20)
		if err == nil {
			f.Close()
		}
		if !fault.IsInput(err) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Open(%s) = %v, want an input error saying %q", c.path, err, c.want)
		}
		if d := time.Since(start); d > time.Second {
			t.Errorf("Open(%s) took %s", c.path, d)
		}
	}
}

// TestGroundFloor: fsys is under both chains, so it imports nothing of the project but fault.
func TestGroundFloor(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", `{{join .Imports "\n"}}`, ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, pkg := range strings.Fields(string(out)) {
		if strings.HasPrefix(pkg, "github.com/toa-deploy/toa-deploy/") && pkg != "github.com/toa-deploy/toa-deploy/internal/fault" {
			t.Errorf("fsys imports %s", pkg)
		}
	}
}
