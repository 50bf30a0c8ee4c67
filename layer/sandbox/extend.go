package sandbox

import (
	"context"
	"errors"
	"path/filepath"
	"strconv"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"golang.org/x/sys/unix"

	"github.com/toa-deploy/toa-deploy/internal/fsys"
)

// extend makes dir, an empty folder, the root of the cache entry prefix (the root of an image's
// lowest layers) with layers (at their places at) applied over it, and says ok; or, where the
// cache holds no such root or it cannot be copied, leaves dir empty and says not ok.
//
// The copy is cheap: its folders are made anew and its files are hard links to the prefix's
// (links made anew), so that a base with a layer or two over it (the lines of build.run, npm's
// global installs) costs what those layers hold, not the whole base again. What the layers do
// never writes through a file the two roots share: the extractor replaces an entry (removes the
// name, writes a new file), changes the modes of folders only (each root's own), and removes
// names for whiteouts and opaque folders, which leaves the other root's names. The root is then
// never written, as any other.
//
// Its size is the prefix's and what the layers wrote: the bytes of the files it holds, as though
// it shared none. Counting what roots share in each of them makes the cache's bound remove more
// than needed while both are kept, never less; once the prefix is removed, the count is exact.
func extend(ctx context.Context, prefix string, layers []v1.Layer, at []layerAt, dir string) (int64, bool, error) {
	holds := fsys.NewHolds() // a prune leaves it while it is copied
	defer holds.Release()
	if err := hold(holds, prefix, filepath.Join(prefix, "root")); err != nil {
		return 0, false, nil
	}
	size, err := entrySize(prefix)
	if err != nil {
		return 0, false, nil
	}
	if err := cloneRoot(ctx, filepath.Join(prefix, "root"), dir); err != nil {
		if ctx.Err() != nil {
			return 0, false, ctx.Err()
		}
		// too many links to one file (EMLINK), a root changed by hand...: unpacked whole instead
		if err := emptyFolder(dir); err != nil {
			return 0, false, err
		}
		return 0, false, nil
	}
	size, err = apply(ctx, layers, at, dir, size)
	return size, err == nil, err
}

// entrySize is the size a root's entry says (fsys.FolderSizeFile).
func entrySize(entry string) (int64, error) {
	data, err := fsys.ReadFile(filepath.Join(entry, fsys.FolderSizeFile), 64)
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
}

// cloneRoot copies the root src into the empty folder dst: folders made anew with src's modes,
// links made anew, regular files hard-linked. Nothing else is in a root (the unpack skips
// devices). Every name is opened from its folder's descriptor without following a link.
func cloneRoot(ctx context.Context, src, dst string) error {
	srcFd, err := unix.Open(src, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(srcFd)
	dstFd, err := unix.Open(dst, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(dstFd)
	var st unix.Stat_t
	if err := unix.Fstat(srcFd, &st); err != nil {
		return err
	}
	if err := cloneFolder(ctx, srcFd, dstFd); err != nil {
		return err
	}
	return chmodFd(dstFd, st.Mode&0o7777)
}

func cloneFolder(ctx context.Context, src, dst int) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	names, err := fsys.NamesAt(src)
	if err != nil {
		return err
	}
	for _, name := range names {
		var st unix.Stat_t
		if err := unix.Fstatat(src, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return err
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFREG:
			err = unix.Linkat(src, name, dst, name, 0)
		case unix.S_IFLNK:
			err = cloneLink(src, dst, name, st.Size)
		case unix.S_IFDIR:
			err = cloneSub(ctx, src, dst, name, st.Mode&0o7777)
		default:
			err = errors.New(name + " is neither a file, a folder nor a link")
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// cloneSub makes the folder name in dst with what src's holds, and then its mode (a folder
// without write permission is filled first).
func cloneSub(ctx context.Context, src, dst int, name string, mode uint32) error {
	if err := unix.Mkdirat(dst, name, 0o700); err != nil {
		return err
	}
	from, err := unix.Openat(src, name, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(from)
	to, err := unix.Openat(dst, name, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(to)
	if err := cloneFolder(ctx, from, to); err != nil {
		return err
	}
	return chmodFd(to, mode)
}

// cloneLink makes name in dst a symbolic link to where src's name leads, of size bytes.
func cloneLink(src, dst int, name string, size int64) error {
	buf := make([]byte, size+1)
	n, err := unix.Readlinkat(src, name, buf)
	if err != nil {
		return err
	}
	if int64(n) != size {
		return errors.New(name + " changed while it was copied")
	}
	return unix.Symlinkat(string(buf[:n]), dst, name)
}

// emptyFolder removes what is in dir, a copy that failed, so that the base is unpacked there whole.
func emptyFolder(dir string) error {
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	names, err := fsys.NamesAt(fd)
	if err != nil {
		return err
	}
	for _, n := range names {
		if err := fsys.RemoveAt(fd, n); err != nil {
			return err
		}
	}
	return nil
}
