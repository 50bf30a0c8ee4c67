package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// The chroot way, where no namespace can be made and toa-push runs as root (a CI job in a
// container under Docker's or containerd's default seccomp profile, which refuses clone's
// namespace flags and mount without CAP_SYS_ADMIN, but leaves chroot, mknod, chown and setuid
// to the container's root): the command runs chrooted in a private copy of the base's root
// (copy.go), which belongs to the sandbox's unprivileged id, as that id, without capabilities or
// a way to gain any, with the devices a build uses made in the copy's /dev and no /proc (the
// runner's would show its processes). Binds cannot be mounts: a read-only one is copied in, modes
// kept (what the command changes of it is its copy's, and goes), and removed after; a writable one
// has its entries moved in and back (it must be on the cache's file system). What is at a bind's place, /dev and /proc is left out of the
// comparison that finds the run's changes (copyRecord.Hidden), as their mounts hide them from the
// overlay's upper folder, so that the layer is the same bytes either way.

// aside is where the chroot way keeps what a base has at a bind's place while the bind is there.
const aside = ".wh..toa-aside-"

// deviceNumbers are the chroot way's devices, made with mknod (the namespace way binds the
// runner's).
var deviceNumbers = map[string][2]uint32{"null": {1, 3}, "zero": {1, 5}, "full": {1, 7}, "random": {1, 8}, "urandom": {1, 9}, "tty": {5, 0}}

// runChroot runs c chrooted in the copy of the root in c.Upper, as the sandbox's id.
func runChroot(ctx context.Context, c Command, ids IDs, record *copyRecord) error {
	if c.Network == NetworkNone {
		return &RunnerError{Platform: c.Platform, Message: "no namespace can be made here, and a network of loopback alone needs a network namespace",
			Hint: "run with the runner's network, or allow user namespaces on the runner"}
	}
	cp := filepath.Join(c.Upper, copyDir)
	binds := append(runnerBinds(), c.Binds...)
	undo, hidden, err := prepareChroot(c, ids, cp, binds)
	defer func() {
		for i := len(undo) - 1; i >= 0; i-- {
			undo[i]()
		}
	}()
	if err != nil {
		return err
	}
	if err := record.hide(c.Upper, hidden); err != nil {
		return err
	}
	stage := c.stage()
	stage.Chroot, stage.UID, stage.GID = cp, ids.UID, ids.GID
	s := spec{Mode: modeChroot, Stage: stage}
	attr := &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	return supervise(ctx, c, s, attr, []watched{{Source: c.Upper, Target: "/"}})
}

// prepareChroot makes the copy's /dev and /proc and puts each bind at its place. It returns what
// undoes the binds, in order, and the places hidden from the comparison.
func prepareChroot(c Command, ids IDs, cp string, binds []Bind) (undo []func(), hidden []string, err error) {
	rootFd, err := unix.Open(cp, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil, err
	}
	defer unix.Close(rootFd)
	if err := makeDev(rootFd); err != nil {
		return nil, nil, setupError(c, fmt.Sprintf("make the devices of the copy of the base: %v", err))
	}
	// root's and empty: the command cannot write there, as it cannot in a mounted /proc
	proc, err := rootFolder(rootFd, "proc", 0o555)
	if err != nil {
		return nil, nil, fmt.Errorf("make /proc in the copy of the base: %w", err)
	}
	unix.Close(proc)
	hidden = []string{"dev", "proc"}
	x := &extractor{root: rootFd}
	for i, b := range binds {
		rel := clean(b.Target)
		place := &bindPlace{c: c, ids: ids, x: x, rel: rel, bind: b, aside: filepath.Join(c.Upper, fmt.Sprintf("%s%d", aside, i)),
			inBase: exists(filepath.Join(c.Root, rel))}
		done, err := place.put()
		if done != nil {
			undo = append(undo, done)
		}
		if err != nil {
			return undo, nil, err
		}
		hidden = append(hidden, rel)
	}
	return undo, hidden, nil
}

// rootFolder opens the folder name of the copy's root (rootFd), root's with mode: a link or a
// file there (a command of an earlier run of the copy may have put one there) is replaced, never
// followed, as what is done in it is root's.
func rootFolder(rootFd int, name string, mode uint32) (int, error) {
	open := func() (int, error) {
		return unix.Openat(rootFd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	}
	fd, err := open()
	if err != nil {
		if err := removeAt(rootFd, name); err != nil {
			return -1, err
		}
		if err := unix.Mkdirat(rootFd, name, 0o700); err != nil {
			return -1, err
		}
		if fd, err = open(); err != nil {
			return -1, err
		}
	}
	if err := unix.Fchown(fd, 0, 0); err != nil {
		unix.Close(fd)
		return -1, err
	}
	if err := unix.Fchmod(fd, mode); err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

func exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

// makeDev makes the copy's /dev root's, with the devices a build uses and nothing else: the
// command cannot add any, as it cannot to the namespace way's tmpfs beyond its size.
func makeDev(rootFd int) error {
	dev, err := rootFolder(rootFd, "dev", 0o755)
	if err != nil {
		return err
	}
	defer unix.Close(dev)
	names, err := namesAt(dev)
	if err != nil {
		return err
	}
	for _, n := range names {
		if err := removeAt(dev, n); err != nil {
			return err
		}
	}
	for name, n := range deviceNumbers {
		if err := unix.Mknodat(dev, name, unix.S_IFCHR|0o666, int(unix.Mkdev(n[0], n[1]))); err != nil {
			return fmt.Errorf("mknod /dev/%s: %w", name, err)
		}
		if err := unix.Fchmodat(dev, name, 0o666, 0); err != nil { // past the umask; a node just made
			return err
		}
	}
	for name, target := range deviceLinks {
		if err := unix.Symlinkat(target, dev, name); err != nil {
			return err
		}
	}
	if err := unix.Mkdirat(dev, "shm", 0o700); err != nil {
		return err
	}
	return unix.Fchmodat(dev, "shm", 0o1777, 0)
}

// bindPlace is a bind of the chroot way.
type bindPlace struct {
	c      Command
	ids    IDs
	x      *extractor // on the copy's root
	rel    string
	bind   Bind
	aside  string // where the base's entries at rel wait
	inBase bool   // the base has an entry at rel
}

// put puts the bind's source at its place in the copy, as the namespace way's mount point is made
// (the folders above it made as the overlay makes them), and returns what undoes it.
func (p *bindPlace) put() (func(), error) {
	info, err := os.Stat(p.bind.Source)
	if err != nil {
		return nil, gone(p.c, fmt.Sprintf("bind %s at %s", p.bind.Source, p.bind.Target), err)
	}
	if !info.IsDir() {
		return p.putFile(info)
	}
	fd, err := p.x.mkdirAll(p.rel)
	if err != nil {
		return nil, fmt.Errorf("make the place of %s in the copy of the base: %w", p.bind.Target, err)
	}
	if err := p.ownParents(); err != nil {
		unix.Close(fd)
		return nil, err
	}
	// the folder itself, held while the run may rename it
	dir, err := unix.Openat(fd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	unix.Close(fd)
	if err != nil {
		return nil, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(dir, &st); err != nil {
		unix.Close(dir)
		return nil, err
	}
	restoreDir := func() {
		_ = unix.Fchown(dir, int(st.Uid), int(st.Gid))
		_ = unix.Fchmod(dir, st.Mode&0o7777)
		unix.Close(dir)
	}
	if err := os.Mkdir(p.aside, 0o700); err != nil {
		restoreDir()
		return nil, err
	}
	asideFd, err := unix.Open(p.aside, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		restoreDir()
		return nil, err
	}
	undoAside := func() {
		_ = moveEntries(asideFd, dir)
		unix.Close(asideFd)
		removeAll(p.aside)
		restoreDir()
	}
	if err := moveEntries(dir, asideFd); err != nil {
		undoAside()
		return nil, fmt.Errorf("set aside what the base has at %s: %w", p.bind.Target, err)
	}
	if p.bind.ReadOnly {
		return p.copyIn(dir, info, undoAside)
	}
	return p.moveIn(dir, info, undoAside)
}

// copyIn copies a read-only folder's tree into dir, the sandbox's id's, modes kept (the id has
// no capability to read past them, as the namespace way's root has): what the command changes
// there is its own copy's, and goes with it. What undoes it removes the copy.
func (p *bindPlace) copyIn(dir int, info fs.FileInfo, undoAside func()) (func(), error) {
	undo := func() {
		if names, err := namesAt(dir); err == nil {
			for _, n := range names {
				_ = removeAt(dir, n)
			}
		}
		undoAside()
	}
	err := copyTree(p.bind.Source, fdPath(dir), p.ids)
	if err == nil {
		err = unix.Fchown(dir, p.ids.UID, p.ids.GID)
	}
	if err == nil {
		err = unix.Fchmod(dir, uint32(info.Mode().Perm()))
	}
	if err != nil {
		return undo, fmt.Errorf("copy %s into the copy of the base at %s: %w", p.bind.Source, p.bind.Target, err)
	}
	return undo, nil
}

// moveIn moves a writable folder's entries into dir and back after the run: a rename each, so
// the folder must be on the copy's file system (the cache's).
func (p *bindPlace) moveIn(dir int, info fs.FileInfo, undoAside func()) (func(), error) {
	if err := p.ids.Own(p.bind.Source); err != nil {
		return undoAside, err
	}
	source, err := unix.Open(p.bind.Source, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return undoAside, err
	}
	undo := func() {
		_ = moveEntries(dir, source)
		unix.Close(source)
		undoAside()
	}
	if err := moveEntries(source, dir); err != nil {
		if errors.Is(err, unix.EXDEV) {
			return undo, &RunnerError{Platform: p.c.Platform,
				Message: fmt.Sprintf("no namespace can be made here, and the writable folder %s is not on the file system of the cache, into whose copy of the base it must move for the run", p.bind.Source),
				Hint:    "keep the cache (TOA_CACHE) and the folders toa-push installs into on one file system, or allow user namespaces on the runner"}
		}
		return undo, fmt.Errorf("move %s into the copy of the base at %s: %w", p.bind.Source, p.bind.Target, err)
	}
	if err := unix.Fchown(dir, p.ids.UID, p.ids.GID); err != nil {
		return undo, err
	}
	return undo, unix.Fchmod(dir, uint32(info.Mode().Perm()))
}

// putFile writes a file's bytes at its place (made as the namespace way makes its mount point),
// the sandbox's, mode kept; a writable one's bytes go back after the run. What undoes it leaves at the place what the namespace way's overlay holds there:
// the base's entry, hidden, or the empty file the mount point was.
func (p *bindPlace) putFile(info fs.FileInfo) (func(), error) {
	if err := p.x.mountPoint(p.rel, false); err != nil {
		return nil, fmt.Errorf("make the place of %s in the copy of the base: %w", p.bind.Target, err)
	}
	if err := p.ownParents(); err != nil {
		return nil, err
	}
	fd, err := unix.Openat2(p.x.root, p.rel, &unix.OpenHow{Flags: unix.O_RDWR | unix.O_CLOEXEC | unix.O_NOFOLLOW,
		Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS})
	if err != nil {
		return nil, err
	}
	target := os.NewFile(uintptr(fd), p.bind.Target)
	undo := func() {
		if !p.bind.ReadOnly {
			_ = copyBack(target, p.bind.Source)
		}
		if !p.inBase {
			_ = target.Truncate(0)
			_ = target.Chown(p.ids.UID, p.ids.GID)
			_ = target.Chmod(0o644)
		}
		target.Close()
	}
	err = overwrite(target, p.bind.Source)
	if err == nil {
		err = target.Chown(p.ids.UID, p.ids.GID)
	}
	if err == nil {
		err = target.Chmod(info.Mode().Perm())
	}
	return undo, err
}

// ownParents gives the folders above the bind's place to the sandbox's id where root made them
// (the base lacked them), so that the command may write there as it may over an overlay.
func (p *bindPlace) ownParents() error {
	if !p.ids.Root {
		return nil
	}
	parts := strings.Split(p.rel, "/")
	for i := 1; i < len(parts); i++ {
		fd, err := p.x.openDir(path.Join(parts[:i]...))
		if err != nil {
			return err
		}
		var st unix.Stat_t
		err = unix.Fstat(fd, &st)
		if err == nil && st.Uid == 0 {
			err = unix.Fchownat(fd, "", p.ids.UID, p.ids.GID, unix.AT_EMPTY_PATH)
		}
		unix.Close(fd)
		if err != nil {
			return err
		}
	}
	return nil
}

// moveEntries renames every entry of the folder from into the folder to.
func moveEntries(from, to int) error {
	names, err := namesAt(from)
	if err != nil {
		return err
	}
	for _, n := range names {
		if err := unix.Renameat(from, n, to, n); err != nil {
			return err
		}
	}
	return nil
}

// copyTree copies the tree under from into the folder to: folders, files and links, modes
// kept, given to ids.
func copyTree(from, to string, ids IDs) error {
	type dirMode struct {
		path string
		mode fs.FileMode
	}
	var dirs []dirMode
	err := filepath.WalkDir(from, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == from {
			return err
		}
		rel, err := filepath.Rel(from, p)
		if err != nil {
			return err
		}
		dst := filepath.Join(to, rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			if err := os.Mkdir(dst, 0o700); err != nil {
				return err
			}
			dirs = append(dirs, dirMode{dst, info.Mode()})
			return os.Lchown(dst, ids.UID, ids.GID)
		case d.Type()&fs.ModeSymlink != 0:
			link, err := os.Readlink(p)
			if err != nil {
				return err
			}
			if err := os.Symlink(link, dst); err != nil {
				return err
			}
			return os.Lchown(dst, ids.UID, ids.GID)
		case d.Type().IsRegular():
			return copyFile(p, dst, info.Mode(), ids)
		}
		return nil
	})
	// the modes last, deepest first: a folder its owner may not write is filled first
	for i := len(dirs) - 1; i >= 0 && err == nil; i-- {
		err = os.Chmod(dirs[i].path, dirs[i].mode&(fs.ModePerm|fs.ModeSetgid|fs.ModeSticky))
	}
	return err
}

// overwrite replaces target's bytes with the file from's.
func overwrite(target *os.File, from string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	if err := target.Truncate(0); err != nil {
		return err
	}
	if _, err := target.Seek(0, io.SeekStart); err != nil {
		return err
	}
	_, err = io.Copy(target, in)
	return err
}

// copyBack replaces the file to's bytes with what the run left in target.
func copyBack(target *os.File, to string) error {
	if _, err := target.Seek(0, io.SeekStart); err != nil {
		return err
	}
	out, err := os.OpenFile(to, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, target)
	if closeErr := out.Close(); err == nil {
		err = closeErr
	}
	return err
}
