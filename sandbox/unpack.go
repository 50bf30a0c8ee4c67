package sandbox

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
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
// everything, mapped to root inside the sandbox). The root is never written after.
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
	if err := extract(ctx, img, tmp); err != nil {
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

// extract writes the image's root file system into the empty folder dir: its layers read top
// first, as mutate.Extract flattens them (whiteouts and opaque folders hide what lies under them,
// an upper layer's entry hides a lower one's), but written straight from each layer's stream,
// decompressed by klauspost/compress, with each layer's digest checked at its end.
func extract(ctx context.Context, img v1.Image, dir string) error {
	rootFd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(rootFd)
	x := &extractor{root: rootFd, seen: map[string]bool{}, opaque: map[string]bool{}}
	layers, err := img.Layers()
	if err != nil {
		return fmt.Errorf("read its layers: %w", err)
	}
	var total int64
	for i := len(layers) - 1; i >= 0; i-- {
		if err := x.layer(ctx, layers[i], &total); err != nil {
			return err
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

// layer writes what of one layer no upper layer hid; total counts the bytes unpacked so far.
func (x *extractor) layer(ctx context.Context, l v1.Layer, total *int64) error {
	digest, err := l.Digest()
	if err != nil {
		return fmt.Errorf("read a layer's digest: %w", err)
	}
	r, err := OpenLayer(l)
	if err != nil {
		return fmt.Errorf("read the layer %s: %w", digest, err)
	}
	defer r.Close()
	hidden := map[string]bool{} // opaque folders of this layer: they hide the layers below it
	tr := tar.NewReader(r)
	for {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("the layer %s: %w", digest, err)
		}
		*total += h.Size
		if *total > MaxBaseSize {
			return fmt.Errorf("its layers unpack to more than %d GiB", MaxBaseSize>>30)
		}
		name := clean(h.Name)
		if name == "" {
			continue
		}
		dir, base := path.Split(name)
		dir = strings.TrimSuffix(dir, "/")
		if base == opaqueWhiteout {
			hidden[dir] = true
			continue
		}
		tombstone := strings.HasPrefix(base, whiteoutPrefix)
		if tombstone {
			name = path.Join(dir, strings.TrimPrefix(base, whiteoutPrefix))
		}
		if _, ok := x.seen[name]; (ok && !tombstone) || x.under(name) {
			continue
		}
		// a file or a whiteout hides what lower layers have at and under its name; a folder
		// hides only a lower layer's entry of its own name
		x.seen[name] = tombstone || h.Typeflag != tar.TypeDir
		if tombstone {
			continue
		}
		if err := x.entry(h, tr); err != nil {
			return fmt.Errorf("%s: %w", h.Name, err)
		}
	}
	for d := range hidden {
		x.opaque[d] = true
	}
	// to the end of the stream, so that the digest is checked
	if _, err := io.Copy(io.Discard, r); err != nil {
		return fmt.Errorf("the layer %s: %w", digest, err)
	}
	return r.Close()
}

// under reports whether an upper layer hid name: a parent of it whited out or replaced by a
// file, or opaque.
func (x *extractor) under(name string) bool {
	for dir := path.Dir(name); dir != "." && dir != "/"; dir = path.Dir(dir) {
		if x.seen[dir] || x.opaque[dir] {
			return true
		}
	}
	return x.opaque[""] || x.opaque["."]
}

const (
	whiteoutPrefix = ".wh."
	opaqueWhiteout = ".wh..wh..opq"
)

// OpenLayer is the layer's tar stream. A layer read from a registry or a layout (it describes
// itself) is read as its compressed bytes, hashed as they are read and decompressed here by what
// their first bytes say (gzip, zstd, or a plain tar), faster than go-containerregistry's
// compress/gzip; Close fails when the bytes read do not have the layer's digest. Another layer
// (made in memory, a tarball file, whose compressed form may be computed) gives its own
// uncompressed stream.
func OpenLayer(l v1.Layer) (io.ReadCloser, error) {
	if _, ok := l.(interface {
		Descriptor() (*v1.Descriptor, error)
	}); !ok {
		return l.Uncompressed()
	}
	digest, err := l.Digest()
	if err != nil {
		return nil, err
	}
	rc, err := l.Compressed()
	if err != nil {
		return nil, err
	}
	h, err := v1.Hasher(digest.Algorithm)
	if err != nil {
		rc.Close()
		return nil, err
	}
	br := bufio.NewReaderSize(io.TeeReader(rc, h), 1<<20)
	magic, _ := br.Peek(4)
	v := &verifiedLayer{compressed: rc, hash: h, want: digest}
	switch {
	case bytes.HasPrefix(magic, []byte{0x1f, 0x8b}):
		zr, err := gzip.NewReader(br)
		if err != nil {
			rc.Close()
			return nil, err
		}
		zr.Multistream(true)
		v.Reader, v.close = zr, zr.Close
	case bytes.HasPrefix(magic, []byte{0x28, 0xb5, 0x2f, 0xfd}):
		zr, err := zstd.NewReader(br, zstd.WithDecoderConcurrency(1))
		if err != nil {
			rc.Close()
			return nil, err
		}
		v.Reader, v.close = zr, func() error { zr.Close(); return nil }
	default:
		v.Reader, v.close = br, func() error { return nil }
	}
	v.rest = br
	return v, nil
}

// verifiedLayer is a layer's decompressed stream whose Close checks the compressed bytes'
// digest, once they were all read.
type verifiedLayer struct {
	io.Reader
	close      func() error
	rest       io.Reader // the compressed bytes, after what the decompressor took
	compressed io.ReadCloser
	hash       hash.Hash
	want       v1.Hash
	closed     bool
	err        error
}

func (v *verifiedLayer) Close() error {
	if v.closed {
		return v.err
	}
	v.closed = true
	v.err = v.close()
	if v.err == nil {
		// what follows the compressed stream (padding) is part of the digest
		_, v.err = io.Copy(io.Discard, v.rest)
	}
	if v.err == nil {
		if got := hex.EncodeToString(v.hash.Sum(nil)); got != v.want.Hex {
			v.err = fmt.Errorf("its bytes have the digest %s:%s, not %s", v.want.Algorithm, got, v.want)
		}
	}
	if err := v.compressed.Close(); v.err == nil {
		v.err = err
	}
	return v.err
}

type extractor struct {
	root   int
	links  []*tar.Header
	seen   map[string]bool // entries an upper layer wrote or whited out: true hides what is under it
	opaque map[string]bool // folders an upper layer made opaque
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
