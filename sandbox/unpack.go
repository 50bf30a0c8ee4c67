package sandbox

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"golang.org/x/sys/unix"
)

// MaxBaseSize bounds what a base's layers may unpack to: a base is tens to hundreds of MiB; a
// layer that unpacks to more is refused rather than filling the runner's disk.
const MaxBaseSize = 8 << 30

// mountPoints are made in every unpacked root, so that what is bound in has a place in the base
// without writing to the layer over it: a run's changes hold none of them.
var mountPoints = []struct {
	path string
	dir  bool
}{
	{"proc", true}, {"dev", true}, {"tmp", true}, {"etc", true}, {"etc/resolv.conf", false},
	{"etc/hosts", false}, {"etc/ssl/certs", true}, {"etc/ssl/certs/ca-certificates.crt", false},
}

// Unpack returns the root file system of img unpacked under cacheDir, once per config digest:
// the layers flattened as a runtime would (whiteouts honoured), into a temporary folder renamed
// into place when whole, so that a root in the cache is never half-written. Entries that would
// lead out of the root (`..`, absolute or relative links followed while unpacking) stay inside it,
// as they resolve in the image; devices are skipped, owners are not kept (the runner's user owns
// everything, mapped to root inside the sandbox). Each layer is read to its end, so that its
// digest is checked before the root is kept (readWhole). The root is never written after.
func Unpack(ctx context.Context, img v1.Image, cacheDir string) (string, error) {
	digest, err := img.ConfigName()
	if err != nil {
		return "", fmt.Errorf("read the base's config digest: %w", err)
	}
	roots := filepath.Join(cacheDir, "roots")
	root := filepath.Join(roots, digest.Algorithm+"-"+digest.Hex)
	if _, err := os.Stat(root); err == nil {
		return root, nil
	}
	if err := os.MkdirAll(roots, 0o755); err != nil {
		return "", fmt.Errorf("create the folder of unpacked bases: %w", err)
	}
	tmp, err := os.MkdirTemp(roots, ".unpack-")
	if err != nil {
		return "", fmt.Errorf("create the folder of unpacked bases: %w", err)
	}
	defer removeAll(tmp)
	whole := &readWhole{Image: img}
	rc := mutate.Extract(whole)
	err = extract(ctx, rc, tmp)
	if err != nil {
		whole.abandoned.Store(true)
	}
	rc.Close()
	if err == nil {
		err = whole.err()
	}
	if err != nil {
		return "", fmt.Errorf("unpack the base %s: %w", digest, err)
	}
	if err := os.Rename(tmp, root); err != nil {
		if _, statErr := os.Stat(root); statErr == nil {
			return root, nil // another run unpacked it first
		}
		return "", fmt.Errorf("keep the unpacked base %s: %w", digest, err)
	}
	return root, nil
}

// extract writes a flattened image's tar stream into the empty folder dir.
func extract(ctx context.Context, r io.Reader, dir string) error {
	rootFd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(rootFd)
	x := &extractor{root: rootFd}
	tr := tar.NewReader(r)
	var total int64
	for {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		total += h.Size
		if total > MaxBaseSize {
			return fmt.Errorf("its layers unpack to more than %d GiB", MaxBaseSize>>30)
		}
		if err := x.entry(h, tr); err != nil {
			return fmt.Errorf("%s: %w", h.Name, err)
		}
	}
	// a hard link may come before the file it links to: the stream is the top layer first
	for _, h := range x.links {
		if err := x.link(h); err != nil {
			return fmt.Errorf("%s: %w", h.Name, err)
		}
	}
	for _, m := range mountPoints {
		if err := x.mountPoint(m.path, m.dir); err != nil {
			return fmt.Errorf("make the mount point /%s: %w", m.path, err)
		}
	}
	return nil
}

type extractor struct {
	root  int
	links []*tar.Header
}

// clean is an entry's path relative to the root, or "" for the root itself.
func clean(name string) string {
	p := path.Clean("/" + name)
	return strings.TrimPrefix(p, "/")
}

// parent opens the folder an entry goes in, made where missing, resolved inside the root.
func (x *extractor) parent(rel string) (int, string, error) {
	dir, base := path.Split(rel)
	fd, err := x.mkdirAll(strings.TrimSuffix(dir, "/"))
	return fd, base, err
}

// mkdirAll opens the folder rel under the root, making each missing folder on the way. Every
// step resolves in the root: a link to /usr or to ../../.. leads to the root's /usr or its root.
func (x *extractor) mkdirAll(rel string) (int, error) {
	fd, err := unix.Dup(x.root)
	if err != nil {
		return -1, err
	}
	if rel == "" {
		return fd, nil
	}
	done := ""
	for _, part := range strings.Split(rel, "/") {
		done = path.Join(done, part)
		next, err := x.openDir(done)
		if errors.Is(err, unix.ENOENT) {
			if err := unix.Mkdirat(fd, part, 0o755); err != nil && !errors.Is(err, unix.EEXIST) {
				unix.Close(fd)
				return -1, err
			}
			next, err = x.openDir(done)
		}
		unix.Close(fd)
		if err != nil {
			return -1, err
		}
		fd = next
	}
	return fd, nil
}

func (x *extractor) openDir(rel string) (int, error) {
	return unix.Openat2(x.root, rel, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS,
	})
}

func (x *extractor) entry(h *tar.Header, r io.Reader) error {
	rel := clean(h.Name)
	if rel == "" {
		return nil
	}
	mode := uint32(h.Mode & 0o7777)
	switch h.Typeflag {
	case tar.TypeDir:
		fd, err := x.mkdirAll(rel)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		return chmodFd(fd, mode|0o700)
	case tar.TypeReg: // archive/tar reads the old TypeRegA as TypeReg
		dirFd, base, err := x.parent(rel)
		if err != nil {
			return err
		}
		defer unix.Close(dirFd)
		_ = unix.Unlinkat(dirFd, base, 0)
		fd, err := unix.Openat(dirFd, base, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, mode|0o600)
		if err != nil {
			return err
		}
		f := os.NewFile(uintptr(fd), rel)
		_, err = io.Copy(f, r)
		if closeErr := f.Close(); err == nil {
			err = closeErr
		}
		return err
	case tar.TypeSymlink:
		dirFd, base, err := x.parent(rel)
		if err != nil {
			return err
		}
		defer unix.Close(dirFd)
		var st unix.Stat_t
		if unix.Fstatat(dirFd, base, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR {
			return nil // a folder of an upper layer already holds this place
		}
		_ = unix.Unlinkat(dirFd, base, 0)
		return unix.Symlinkat(h.Linkname, dirFd, base)
	case tar.TypeLink:
		x.links = append(x.links, h)
		return nil
	default: // devices and fifos: the sandbox binds the few devices a build needs
		return nil
	}
}

// link makes a hard link, both ends resolved inside the root.
func (x *extractor) link(h *tar.Header) error {
	target := clean(h.Linkname)
	if target == "" {
		return fmt.Errorf("a hard link to the root")
	}
	fromFd, fromBase, err := x.parent(target)
	if err != nil {
		return err
	}
	defer unix.Close(fromFd)
	toFd, toBase, err := x.parent(clean(h.Name))
	if err != nil {
		return err
	}
	defer unix.Close(toFd)
	_ = unix.Unlinkat(toFd, toBase, 0)
	return unix.Linkat(fromFd, fromBase, toFd, toBase, 0)
}

// mountPoint makes rel a folder or an empty file, replacing a link (a base's resolv.conf often
// links to a file of systemd's) so that a bind mount lands inside the root.
func (x *extractor) mountPoint(rel string, dir bool) error {
	if dir {
		fd, err := x.mkdirAll(rel)
		if err == nil {
			unix.Close(fd)
		}
		return err
	}
	dirFd, base, err := x.parent(rel)
	if err != nil {
		return err
	}
	defer unix.Close(dirFd)
	var st unix.Stat_t
	if unix.Fstatat(dirFd, base, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFREG {
		return nil
	}
	_ = unix.Unlinkat(dirFd, base, 0)
	fd, err := unix.Openat(dirFd, base, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return err
	}
	return unix.Close(fd)
}

// chmodFd changes the mode of what an O_PATH descriptor opened, through its /proc/self/fd link
// (fchmod refuses O_PATH descriptors; a path would be resolved outside the root).
func chmodFd(fd int, mode uint32) error {
	return os.Chmod(fmt.Sprintf("/proc/self/fd/%d", fd), os.FileMode(mode&0o777)|modeBits(mode))
}

func modeBits(mode uint32) os.FileMode {
	var m os.FileMode
	if mode&unix.S_ISUID != 0 {
		m |= os.ModeSetuid
	}
	if mode&unix.S_ISGID != 0 {
		m |= os.ModeSetgid
	}
	if mode&unix.S_ISVTX != 0 {
		m |= os.ModeSticky
	}
	return m
}

// removeAll removes a folder whose sub-folders may lack write permission for their owner.
func removeAll(dir string) {
	if os.RemoveAll(dir) == nil {
		return
	}
	// WalkDir, unlike Walk, calls back before it reads a folder: overlayfs leaves its work
	// folder with mode 0
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			_ = os.Chmod(p, 0o755)
		}
		return nil
	})
	_ = os.RemoveAll(dir)
}
