package sandbox

import (
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"
)

// Change is one entry of what runs in a base changed, in the order an OCI layer lists them:
// folders before what they hold, the entries of a folder in byte order of their names.
type Change struct {
	Name     string      // slash-separated, relative to the root
	Path     string      // the entry on the runner, to read it from; "" for a whiteout
	Info     fs.FileInfo // the entry's (not followed); nil for a whiteout
	Whiteout bool        // Name was removed
	Opaque   bool        // Name is a folder that replaces the base's: all it holds is here
}

// Changes calls visit for every change the runs of Command.Upper made to root, the same
// changes whichever way they ran: read from overlayfs's upper folder (its whiteouts, character
// devices 0/0, and its opaque folders), or, where the kernel refused overlayfs and the runs had a
// private copy of the root, found by comparing the copy with root (see copy.go).
func Changes(root, upper string, visit func(Change) error) error {
	state, err := readCopy(upper)
	if err != nil {
		return err
	}
	if state != nil {
		return state.changes(root, upper, visit)
	}
	return filepath.WalkDir(upper, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(upper, p)
		if err != nil || rel == "." {
			return err
		}
		info, err := os.Lstat(p)
		if err != nil {
			return err
		}
		c := Change{Name: filepath.ToSlash(rel), Path: p, Info: info}
		switch {
		case info.IsDir():
			c.Opaque = opaque(p)
		case info.Mode()&fs.ModeCharDevice != 0 && isWhiteout(info):
			c = Change{Name: c.Name, Whiteout: true}
		}
		return visit(c)
	})
}

// isWhiteout is overlayfs's mark of a removed file: a character device 0/0.
func isWhiteout(info fs.FileInfo) bool {
	st, ok := info.Sys().(*syscall.Stat_t)
	return ok && st.Rdev == 0
}

// opaque reports whether overlayfs marked the folder as replacing the lower one's contents
// (user.overlay.opaque, as it writes it inside a user namespace).
func opaque(dir string) bool {
	buf := make([]byte, 8)
	for _, attr := range []string{"user.overlay.opaque", "trusted.overlay.opaque"} {
		if n, err := unix.Lgetxattr(dir, attr, buf); err == nil && n > 0 && buf[0] == 'y' {
			return true
		}
	}
	return false
}
