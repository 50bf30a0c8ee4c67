package fsys

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// RemoveAll removes path and all under it without following a link: a link at path or anywhere
// under it is removed as a link, and each folder is opened from its parent's descriptor with
// O_NOFOLLOW, so that a link put in a folder's place meanwhile (by a script left running, by
// whoever can write the cache) leads nowhere. Folders their owner cannot write or read (an
// image's read-only folders, a script's chmod, overlayfs's work folder of mode 0) are given
// their owner's permissions first. The folders leading to path are resolved as given: path is
// the caller's own. A missing path is no error.
func RemoveAll(path string) error {
	path = filepath.Clean(path)
	dir, name := filepath.Split(path)
	if name == "" || name == "." || name == ".." {
		return fmt.Errorf("remove %s: not a name of its own", path)
	}
	if dir == "" {
		dir = "."
	}
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("remove %s: %w", path, err)
	}
	defer unix.Close(fd)
	if err := RemoveAt(fd, name); err != nil {
		return fmt.Errorf("remove %s: %w", path, err)
	}
	return nil
}

// RemoveAt removes name in the folder dirFd and, when it is a folder, all in it, as RemoveAll
// does: never through a link. A missing name is no error.
func RemoveAt(dirFd int, name string) error {
	err := unix.Unlinkat(dirFd, name, 0)
	if err == nil || errors.Is(err, unix.ENOENT) {
		return nil
	}
	if !errors.Is(err, unix.EISDIR) {
		return err
	}
	fd, err := unix.Openat(dirFd, name, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	switch {
	case errors.Is(err, unix.ENOENT):
		return nil
	case errors.Is(err, unix.ENOTDIR), errors.Is(err, unix.ELOOP): // a file or a link now
		return ignoreMissing(unix.Unlinkat(dirFd, name, 0))
	case err != nil:
		return err
	}
	err = removeContents(fd)
	unix.Close(fd)
	if err != nil {
		return err
	}
	return ignoreMissing(unix.Unlinkat(dirFd, name, unix.AT_REMOVEDIR))
}

// removeContents removes what is in the folder fd (an O_PATH descriptor, opened without
// following a link), its owner given rwx on it first where it lacks them.
func removeContents(fd int) error {
	if err := ownerRWX(fd); err != nil {
		return err
	}
	names, err := NamesAt(fd)
	if err != nil {
		return err
	}
	for _, n := range names {
		if err := RemoveAt(fd, n); err != nil {
			return err
		}
	}
	return nil
}

// ownerRWX gives the owner of what fd (an O_PATH descriptor) opened read, write and search
// permission when it lacks one, through its /proc/self/fd link: fchmod refuses O_PATH
// descriptors, and a path would be resolved again.
func ownerRWX(fd int) error {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	if st.Mode&0o700 == 0o700 {
		return nil
	}
	return unix.Chmod(fmt.Sprintf("/proc/self/fd/%d", fd), (st.Mode&0o7777)|0o700)
}

// NamesAt lists the folder fd, which may be an O_PATH descriptor, through a descriptor of its
// own.
func NamesAt(fd int) ([]string, error) {
	dup, err := unix.Openat(fd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(dup), ".")
	defer f.Close()
	return f.Readdirnames(-1)
}

func ignoreMissing(err error) error {
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	return err
}
