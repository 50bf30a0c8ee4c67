package sandbox

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"golang.org/x/sys/unix"

	"github.com/toa-deploy/toa-deploy/internal/fsys"
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

// Unpack returns the root file system of img unpacked under cacheDir (fsys.BaseRoots), once per
// chain of layers (ChainID, never the config digest: a config can be put over other layers):
// its layers applied in order as a runtime applies them (whiteouts and opaque folders honoured),
// into a temporary folder renamed into place when whole, so that a root in the cache is never
// half-written. Entries that would lead out of the root (`..`, absolute or relative links followed
// while unpacking) stay inside it, as they resolve in the image; devices are skipped, owners are
// not kept (the runner's user owns everything, mapped to root inside the sandbox). Each layer is
// read to its end, so that its digest and its diff ID are checked before the root is kept
// (openLayer): a root in the cache holds what its key names. The root is never written after.
func Unpack(ctx context.Context, img v1.Image, cacheDir string) (string, error) {
	return UnpackHeld(ctx, img, cacheDir, nil)
}

// UnpackHeld is Unpack, with the root's entry in the cache held by holds (fsys.Holds) until
// they are released, so that another run's prune of the cache leaves it while it is used. A root
// that a prune removed between the look and the hold, found or freshly unpacked, is unpacked
// again, a bounded number of times.
func UnpackHeld(ctx context.Context, img v1.Image, cacheDir string, holds *fsys.Holds) (string, error) {
	name := baseName(img)
	roots := filepath.Join(cacheDir, "roots")
	chain, err := chainIDs(img)
	if err != nil {
		return "", fmt.Errorf("unpack the base %s: %w", name, err)
	}
	entry := rootEntry(roots, chainKey(chain))
	root := filepath.Join(entry, "root")
	for tries := 1; ; tries++ {
		if _, err := os.Stat(root); err != nil {
			if err := unpack(ctx, img, name, chain, roots, entry); err != nil {
				return "", err
			}
		}
		err := hold(holds, entry, root)
		if err == nil {
			fsys.Touch(entry) // used now: the cache's bound removes the least recently used first
			return root, nil
		}
		if !errors.Is(err, fsys.ErrGone) || tries == unpackTries {
			return "", err
		}
	}
}

// rootEntry is the folder of the root of the layers whose chain ID is key (fsys.BaseRoots).
func rootEntry(roots string, key v1.Hash) string {
	return filepath.Join(roots, key.Algorithm+"-"+key.Hex)
}

// baseName names img in messages: its manifest's digest, as the plan and the kustomization name
// a base.
func baseName(img v1.Image) string {
	if d, err := img.Digest(); err == nil {
		return d.String()
	}
	return "of this platform"
}

// unpackTries bounds the unpacks of a root that other runs' prunes keep removing before it is
// held (each prune takes the least recently used first: a root just unpacked goes only when the
// cache's bound leaves no room for it).
const unpackTries = 3

// hold holds the entry of root, and says ErrGone when the root is not in it once held.
func hold(holds *fsys.Holds, entry, root string) error {
	if err := holds.Hold(entry); err != nil {
		return fmt.Errorf("the unpacked base %s: %w", entry, err)
	}
	if _, err := os.Stat(root); err != nil {
		return fmt.Errorf("the unpacked base %s: %w", entry, fsys.ErrGone)
	}
	return nil
}

// unpack unpacks img, named name in messages, the chain IDs of whose layers are chain, as
// entry's root, whole or not at all: from the root of the longest chain of its lowest layers the
// cache holds (extend), else from its first layer.
func unpack(ctx context.Context, img v1.Image, name string, chain []v1.Hash, roots, entry string) error {
	root := filepath.Join(entry, "root")
	if err := os.MkdirAll(roots, 0o755); err != nil {
		return fmt.Errorf("create the folder of unpacked bases: %w", err)
	}
	tmp, err := os.MkdirTemp(roots, fsys.PartialPrefix+"unpack-")
	if err != nil {
		return fmt.Errorf("create the folder of unpacked bases: %w", err)
	}
	defer removeAll(tmp)
	if err := os.Mkdir(filepath.Join(tmp, "root"), 0o755); err != nil {
		return fmt.Errorf("create the folder of unpacked bases: %w", err)
	}
	size, err := makeRoot(ctx, img, chain, roots, filepath.Join(tmp, "root"))
	if err != nil {
		return fmt.Errorf("unpack the base %s: %w", name, err)
	}
	// the sandbox's root is another id than toa-push's when it runs as root (ids.go)
	if err := OwnUnpacked(filepath.Join(tmp, "root")); err != nil {
		return fmt.Errorf("unpack the base %s: %w", name, err)
	}
	// what the cache's bound counts, without walking the root at every run's end
	if err := os.WriteFile(filepath.Join(tmp, fsys.FolderSizeFile), []byte(strconv.FormatInt(size, 10)), 0o644); err != nil {
		return fmt.Errorf("keep the unpacked base %s: %w", name, err)
	}
	if _, err := os.Stat(root); err == nil {
		return nil // another run unpacked it meanwhile
	}
	removeAll(entry) // an entry without its root: the root itself, as toa-push kept it before
	if err := os.Rename(tmp, entry); err != nil {
		if _, statErr := os.Stat(root); statErr == nil {
			return nil // another run unpacked it first
		}
		return fmt.Errorf("keep the unpacked base %s: %w", name, err)
	}
	return nil
}

// makeRoot makes dir, an empty folder, the root of img: a copy of the root of its lowest layers
// that the cache holds, the longest such chain (extend), with the layers above applied; else all
// its layers applied. The size of the root is returned.
func makeRoot(ctx context.Context, img v1.Image, chain []v1.Hash, roots, dir string) (int64, error) {
	layers, at, err := baseLayers(img)
	if err != nil {
		return 0, err
	}
	for k := len(layers) - 1; k >= 1; k-- {
		size, ok, err := extend(ctx, rootEntry(roots, chain[k-1]), layers[k:], at[k:], dir)
		if err != nil || ok {
			return size, err
		}
	}
	return apply(ctx, layers, at, dir, 0)
}

// apply writes layers (at their places at), the lowest first, into the folder dir, over what it
// holds (size bytes), and makes the mount points. Applying each layer over the ones below, as
// containerd and containers/storage do, reads each tar once; a flattened stream (mutate.Extract)
// wrote every entry into a pipe and read it back, a fifth of the unpack's processor time.
// The bytes of the files written are returned, size among them.
func apply(ctx context.Context, layers []v1.Layer, at []layerAt, dir string, size int64) (int64, error) {
	rootFd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, err
	}
	defer unix.Close(rootFd)
	x := &extractor{root: rootFd, total: size}
	for i, l := range layers {
		if err := x.layer(ctx, l, at[i]); err != nil {
			return 0, err
		}
	}
	for _, m := range mountPoints {
		if err := x.mountPoint(m.path, m.dir); err != nil {
			return 0, fmt.Errorf("make the mount point /%s: %w", m.path, err)
		}
	}
	return x.total, nil
}

// The names by which a layer removes what the layers below it hold (OCI image spec,
// "Representing Changes"): .wh.<name> removes <name>, .wh..wh..opq in a folder removes all that
// the layers below put in it.
const (
	whiteoutPrefix = ".wh."
	opaqueWhiteout = ".wh..wh..opq"
)

// layer applies one layer, at its place at in the base, over what is unpacked, and reads the
// rest of it, checked against its digest and its diff ID, unless that failed (openLayer).
func (x *extractor) layer(ctx context.Context, l v1.Layer, at layerAt) error {
	r, err := openLayer(l, at)
	if err != nil {
		return err
	}
	err = x.entries(ctx, tar.NewReader(r))
	if closeErr := r.close(err == nil); err == nil {
		err = closeErr
	}
	return err
}

func (x *extractor) entries(ctx context.Context, tr *tar.Reader) error {
	written := map[string]bool{} // what this layer wrote: an opaque folder keeps it
	var opaque []string
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
		x.total += h.Size
		if x.total > MaxBaseSize {
			return fmt.Errorf("its layers unpack to more than %d GiB", MaxBaseSize>>30)
		}
		rel := clean(h.Name)
		dir, base := path.Split(rel)
		switch {
		case rel == "":
			continue
		case base == opaqueWhiteout:
			opaque = append(opaque, strings.TrimSuffix(dir, "/"))
			continue
		case strings.HasPrefix(base, whiteoutPrefix):
			err = x.whiteout(dir, strings.TrimPrefix(base, whiteoutPrefix))
		default:
			written[rel] = true
			err = x.entry(h, tr)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", h.Name, err)
		}
	}
	// after the layer's entries, which may come before the marker in the tar
	for _, dir := range opaque {
		if err := x.clear(dir, written); err != nil {
			return fmt.Errorf("%s: %w", path.Join(dir, opaqueWhiteout), err)
		}
	}
	return nil
}

type extractor struct {
	root  int
	total int64 // bytes of the files written so far
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
	if rel == "" {
		return unix.Dup(x.root)
	}
	// most entries go into a folder made before them: one resolution of the whole path
	if fd, err := x.openDir(rel); !errors.Is(err, unix.ENOENT) {
		return fd, err
	}
	fd, err := unix.Dup(x.root)
	if err != nil {
		return -1, err
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
	if rel == "" {
		rel = "."
	}
	return unix.Openat2(x.root, rel, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS,
	})
}

// entry writes one entry of a layer over what the layers below put at its place: a folder stays
// a folder (its mode changed), anything else there is removed first, never written through.
func (x *extractor) entry(h *tar.Header, r io.Reader) error {
	rel := clean(h.Name)
	mode := uint32(h.Mode & 0o7777)
	if h.Typeflag != tar.TypeDir && h.Typeflag != tar.TypeReg && h.Typeflag != tar.TypeSymlink && h.Typeflag != tar.TypeLink {
		return nil // devices and fifos: the sandbox binds the few devices a build needs
	}
	dirFd, base, err := x.parent(rel)
	if err != nil {
		return err
	}
	defer unix.Close(dirFd)
	var st unix.Stat_t
	if unix.Fstatat(dirFd, base, &st, unix.AT_SYMLINK_NOFOLLOW) == nil {
		if h.Typeflag == tar.TypeDir && st.Mode&unix.S_IFMT == unix.S_IFDIR {
			return x.chmod(rel, mode)
		}
		if err := removeAt(dirFd, base); err != nil {
			return err
		}
	}
	switch h.Typeflag {
	case tar.TypeDir:
		if err := unix.Mkdirat(dirFd, base, 0o700); err != nil {
			return err
		}
		return x.chmod(rel, mode)
	case tar.TypeReg: // archive/tar reads the old TypeRegA as TypeReg
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
		return unix.Symlinkat(h.Linkname, dirFd, base)
	default: // tar.TypeLink: to an entry of this layer before it, or of a layer below
		return x.link(h.Linkname, dirFd, base)
	}
}

// chmod gives the folder rel its mode, kept writable for its owner (the unpack writes in it).
func (x *extractor) chmod(rel string, mode uint32) error {
	fd, err := x.openDir(rel)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return chmodFd(fd, mode|0o700)
}

// link makes base in the folder dirFd a hard link to target, resolved inside the root.
func (x *extractor) link(target string, dirFd int, base string) error {
	rel := clean(target)
	if rel == "" {
		return fmt.Errorf("a hard link to the root")
	}
	fromFd, fromBase, err := x.parent(rel)
	if err != nil {
		return err
	}
	defer unix.Close(fromFd)
	return unix.Linkat(fromFd, fromBase, dirFd, base, 0)
}

// whiteout removes name in the folder dir and all under it, when it is there: what a lower
// layer put. A name that is no entry of dir (".wh.." and ".wh..." would name dir itself and its
// parent, which for the root is outside it) is refused.
func (x *extractor) whiteout(dir, name string) error {
	if name == "" || name == "." || name == ".." {
		return fmt.Errorf("a whiteout that names no entry of its folder")
	}
	dirFd, err := x.openDir(strings.TrimSuffix(dir, "/"))
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
		return nil // nothing below to remove
	}
	if err != nil {
		return err
	}
	defer unix.Close(dirFd)
	return removeAt(dirFd, name)
}

// clear removes what is in the folder dir but was not written by this layer (written): an
// opaque folder hides all the layers below put in it.
func (x *extractor) clear(dir string, written map[string]bool) error {
	fd, err := x.openDir(dir)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return clearAt(fd, dir, written)
}

func clearAt(dirFd int, dir string, written map[string]bool) error {
	names, err := namesAt(dirFd)
	if err != nil {
		return err
	}
	for _, name := range names {
		rel := path.Join(dir, name)
		if !written[rel] {
			if err := removeAt(dirFd, name); err != nil {
				return err
			}
			continue
		}
		sub, err := unix.Openat(dirFd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP) {
			continue // a file or a link this layer wrote
		}
		if err != nil {
			return err
		}
		err = clearAt(sub, rel, written)
		unix.Close(sub)
		if err != nil {
			return err
		}
	}
	return nil
}

// removeAt removes name in the folder dirFd and, for a folder, all in it; never through a link.
func removeAt(dirFd int, name string) error { return fsys.RemoveAt(dirFd, name) }

// namesAt lists the folder fd (read through a descriptor of its own, fd stays at its start).
func namesAt(fd int) ([]string, error) { return fsys.NamesAt(fd) }

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

// removeAll removes a folder of the cache's (a failed unpack, a sandbox's work folder), whose
// folders may lack permissions for their owner, never through a link a command in the sandbox
// may have left (fsys.RemoveAll). A folder that cannot be removed is left for the cache's prune.
func removeAll(dir string) { _ = fsys.RemoveAll(dir) }
