package sandbox

import (
	"errors"
	"os"
	"path"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// muslLoaderDirs are where a base keeps musl's dynamic loader, ld-musl-<arch>.so.1: the one path
// (/lib, or /usr/lib where /lib links there) that every program linked against musl names.
var muslLoaderDirs = []string{"lib", "usr/lib"}

// Libc says which C library the programs of an unpacked root (Unpack) load: "musl" where one of
// muslLoaderDirs holds musl's loader, else "glibc". The folders are resolved inside the root: a
// /lib that links to an absolute /usr/lib is the root's, never the runner's.
func Libc(root string) (string, error) {
	rootFd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", err
	}
	defer unix.Close(rootFd)
	for _, dir := range muslLoaderDirs {
		fd, err := unix.Openat2(rootFd, dir, &unix.OpenHow{
			Flags:   unix.O_RDONLY | unix.O_DIRECTORY | unix.O_CLOEXEC,
			Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS,
		})
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
			continue
		}
		if err != nil {
			return "", err
		}
		f := os.NewFile(uintptr(fd), dir)
		names, err := f.Readdirnames(-1)
		f.Close()
		if err != nil {
			return "", err
		}
		for _, name := range names {
			if IsMuslLoader(dir + "/" + name) {
				return "musl", nil
			}
		}
	}
	return "glibc", nil
}

// IsMuslLoader is whether a path in an image (a tar entry's name: "lib/ld-musl-x86_64.so.1",
// "./usr/lib/...") is musl's dynamic loader where Libc looks for it.
func IsMuslLoader(name string) bool {
	name = strings.TrimPrefix(path.Clean("/"+name), "/")
	return strings.HasPrefix(path.Base(name), "ld-musl-") && slices.Contains(muslLoaderDirs, path.Dir(name))
}
