package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The fallback where the kernel refuses overlayfs in a user namespace (before Linux 5.11, or
// with it turned off there): the runs of a Command.Upper work on a private copy of the root, made
// in Upper at the first run and used by the runs after it, and Changes finds what they changed
// by comparing the copy with the root. The rule is overlayfs's copy-up: an entry is in the
// layer when a run touched it (its inode's ctime is after the copy was made: written, chmod-ed,
// renamed, made), whether or not its bytes differ, so that both ways give the same layer; a
// folder made where the base had one (or a file) replaces it (opaque), as overlayfs marks it.
const (
	copyDir   = ".wh..toa-root" // Upper's copy of the root; no layer can hold such a name
	copyState = ".wh..toa-copy" // Upper's record of the copy (copyRecord)
	copyProbe = ".wh..toa-mark"
)

// NoOverlayEnv set to 1 makes the sandbox take overlayfs as refused, as an old kernel does: a
// test hook, so that both ways run on one machine.
const NoOverlayEnv = "TOA_SANDBOX_NO_OVERLAY"

// copyRecord is what Changes needs of the copy: when it was made, and its folders' inodes.
type copyRecord struct {
	// Mark is a ctime (ns) no later than any entry the copy made, and earlier than any change
	// after it.
	Mark int64             `json:"mark"`
	Dirs map[string]uint64 `json:"dirs"` // the copy's folders by name: their inodes when made
	// Chroot marks a copy the runs use chrooted, without namespaces (chroot.go).
	Chroot bool `json:"chroot,omitempty"`
	// Hidden are the places the chroot way's runs had something of their own (/dev, /proc, the
	// binds), which mounts hide from an overlay's upper folder: left out of the comparison.
	Hidden []string `json:"hidden,omitempty"`
}

// hide adds places to the record's Hidden, and writes it into upper.
func (r *copyRecord) hide(upper string, places []string) error {
	for _, p := range places {
		if !slices.Contains(r.Hidden, p) {
			r.Hidden = append(r.Hidden, p)
		}
	}
	return r.write(upper)
}

func (r *copyRecord) write(upper string) error {
	data, err := json.Marshal(r)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(upper, copyState), data, 0o600)
}

// readCopy is Upper's record of a copy, or nil where the runs had an overlay.
func readCopy(upper string) (*copyRecord, error) {
	data, err := os.ReadFile(filepath.Join(upper, copyState))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var r copyRecord
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("read the record of the base's copy in %s: %w", upper, err)
	}
	return &r, nil
}

// makeCopy copies root into upper/copyDir: folders, files (their bytes: copy_file_range, so a
// file system that can shares the blocks), links, modes; not devices, fifos or sockets, which a
// base's unpacked root does not hold. Hard links become files of their own, as overlayfs's
// copy-up makes them. Everything is the sandbox's ids'; chroot marks a copy for the chroot way.
// It returns the bytes copied.
func makeCopy(ctx context.Context, root, upper string, ids IDs, chroot bool) (int64, error) {
	dst := filepath.Join(upper, copyDir)
	record := copyRecord{Dirs: map[string]uint64{}, Chroot: chroot}
	own := func(p string) error {
		if !ids.Root {
			return nil
		}
		return os.Lchown(p, ids.UID, ids.GID)
	}
	if err := ids.Own(upper); err != nil {
		return 0, err
	}
	var size int64
	type dirMode struct {
		path string
		mode fs.FileMode
	}
	var dirs []dirMode
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		to := filepath.Join(dst, rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case info.IsDir():
			if err := os.Mkdir(to, 0o700); err != nil {
				return err
			}
			if err := own(to); err != nil {
				return err
			}
			ino, err := inodeOf(to)
			if err != nil {
				return err
			}
			record.Dirs[filepath.ToSlash(rel)] = ino
			dirs = append(dirs, dirMode{to, info.Mode()})
		case info.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			if err := os.Symlink(target, to); err != nil {
				return err
			}
			return own(to)
		case info.Mode().IsRegular():
			size += info.Size()
			return copyFile(p, to, info.Mode(), ids)
		}
		return nil
	})
	if err != nil {
		return size, err
	}
	// the modes last, deepest first: a folder its owner may not write is filled first
	for i := len(dirs) - 1; i >= 0; i-- {
		if err := os.Chmod(dirs[i].path, dirs[i].mode&(fs.ModePerm|fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky)); err != nil {
			return size, err
		}
	}
	if record.Mark, err = mark(upper); err != nil {
		return size, err
	}
	return size, record.write(upper)
}

// copyFile copies a file's bytes and mode, the file given to ids when root runs (before the
// mode, which a change of owner would strip of its setuid bit).
func copyFile(from, to string, mode fs.FileMode, ids IDs) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	if err == nil && ids.Root {
		err = out.Chown(ids.UID, ids.GID)
	}
	if err == nil {
		err = out.Chmod(mode & (fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky))
	}
	if closeErr := out.Close(); err == nil {
		err = closeErr
	}
	return err
}

// mark returns a ctime after every entry made so far and before any made from now on: the
// ctime of a new file, once the clock the file system stamps with (coarse: a few milliseconds,
// or a second on some) has moved past it.
func mark(upper string) (int64, error) {
	probe := filepath.Join(upper, copyProbe)
	if err := os.WriteFile(probe, nil, 0o600); err != nil {
		return 0, err
	}
	defer os.Remove(probe)
	first, err := ctimeOf(probe)
	if err != nil {
		return 0, err
	}
	deadline := time.Now().Add(3 * time.Second)
	for mode := fs.FileMode(0o400); time.Now().Before(deadline); mode ^= 0o200 {
		if err := os.Chmod(probe, mode); err != nil {
			return 0, err
		}
		now, err := ctimeOf(probe)
		if err != nil {
			return 0, err
		}
		if now > first {
			return first, nil
		}
		time.Sleep(time.Millisecond)
	}
	return 0, fmt.Errorf("the clock of the file system of %s does not move", upper)
}

func ctimeOf(p string) (int64, error) {
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		return 0, err
	}
	return st.Ctim.Nano(), nil
}

func inodeOf(p string) (uint64, error) {
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		return 0, err
	}
	return st.Ino, nil
}

// touched reports whether a run changed the entry after the copy was made.
func (r *copyRecord) touched(info fs.FileInfo) bool {
	st, ok := info.Sys().(*syscall.Stat_t)
	return !ok || time.Unix(int64(st.Ctim.Sec), int64(st.Ctim.Nsec)).UnixNano() > r.Mark
}

// replaced reports whether the folder rel of the copy is not the one the copy made: removed and
// made again (a file system may give the new one the old inode's number: its birth time says).
func (r *copyRecord) replaced(rel, p string, info fs.FileInfo) bool {
	st, ok := info.Sys().(*syscall.Stat_t)
	ino, made := r.Dirs[rel]
	if !ok || !made || st.Ino != ino {
		return true
	}
	var stx unix.Statx_t
	if unix.Statx(unix.AT_FDCWD, p, unix.AT_SYMLINK_NOFOLLOW, unix.STATX_BTIME, &stx) == nil && stx.Mask&unix.STATX_BTIME != 0 {
		return stx.Btime.Sec*1e9+int64(stx.Btime.Nsec) > r.Mark
	}
	return false
}

// changes visits what the runs changed in the copy, compared with root, in overlayfs's order.
func (r *copyRecord) changes(root, upper string, visit func(Change) error) error {
	list, err := r.diff(root, filepath.Join(upper, copyDir), "")
	if err != nil {
		return fmt.Errorf("compare the base's copy with the base: %w", err)
	}
	for _, c := range list {
		if err := visit(c); err != nil {
			return err
		}
	}
	return nil
}

// diff lists the changes under the folder rel ("" for the root): an entry the base lacks, or
// that a run touched; a whiteout for an entry the copy lacks; a folder that holds a change.
func (r *copyRecord) diff(root, cp, rel string) ([]Change, error) {
	base, err := entries(filepath.Join(root, rel))
	if err != nil {
		return nil, err
	}
	copied, err := entries(filepath.Join(cp, rel))
	if err != nil {
		return nil, err
	}
	var out []Change
	for _, name := range union(base, copied) {
		name := path.Join(rel, name)
		b, inBase := base[path.Base(name)]
		c, inCopy := copied[path.Base(name)]
		p := filepath.Join(cp, filepath.FromSlash(name))
		switch {
		case slices.Contains(r.Hidden, name):
			// the chroot way's own: the mount point alone, where the base lacked it
			if inCopy && !inBase {
				out = append(out, Change{Name: name, Path: p, Info: c})
			}
		case !inCopy:
			out = append(out, Change{Name: name, Whiteout: true})
		case c.IsDir() && (!inBase || !b.IsDir() || r.replaced(name, p, c)):
			out = append(out, Change{Name: name, Path: p, Info: c, Opaque: inBase})
			all, err := everything(p, name)
			if err != nil {
				return nil, err
			}
			out = append(out, all...)
		case c.IsDir():
			below, err := r.diff(root, cp, name)
			if err != nil {
				return nil, err
			}
			if len(below) > 0 || r.touched(c) {
				out = append(out, Change{Name: name, Path: p, Info: c})
				out = append(out, below...)
			}
		case !inBase || r.touched(c):
			out = append(out, Change{Name: name, Path: p, Info: c})
		}
	}
	return out, nil
}

// everything lists what the folder dir (named name) holds, all of it new.
func everything(dir, name string) ([]Change, error) {
	var out []Change
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		out = append(out, Change{Name: path.Join(name, filepath.ToSlash(rel)), Path: p, Info: info})
		return nil
	})
	return out, err
}

// entries are a folder's entries by name, not followed; none where it is not a folder.
func entries(dir string) (map[string]fs.FileInfo, error) {
	list, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	out := make(map[string]fs.FileInfo, len(list))
	for _, d := range list {
		info, err := d.Info()
		if err != nil {
			return nil, err
		}
		out[d.Name()] = info
	}
	return out, nil
}

func union(a, b map[string]fs.FileInfo) []string {
	names := make([]string, 0, len(a)+len(b))
	for n := range a {
		names = append(names, n)
	}
	for n := range b {
		if _, ok := a[n]; !ok {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	return names
}
