package kustomize

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"

	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/toa-deploy/toa-deploy/internal/fault"
)

// MaxFileSize is the largest file of a kustomization toa-apply reads: far above what Kubernetes
// objects take (etcd holds 1.5 MiB an object), far below what would exhaust its memory.
const MaxFileSize = 64 << 20

// OnDisk is the disk as Render reads a user's folder from it: a file is read only when it is a
// regular file (a link to one is followed) of at most MaxFileSize, so that a named pipe does not
// hang toa-apply, nor a link to /dev/zero fill its memory. Anything else is a *fault.Input that
// names the file.
func OnDisk() filesys.FileSystem { return boundedDisk{filesys.MakeFsOnDisk()} }

type boundedDisk struct{ filesys.FileSystem }

func (d boundedDisk) ReadFile(path string) ([]byte, error) {
	f, err := d.open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, err
	}
	if len(data) > MaxFileSize {
		return nil, tooLarge(path)
	}
	return data, nil
}

func (d boundedDisk) Open(path string) (filesys.File, error) {
	return d.open(path)
}

// open opens path without blocking (a named pipe would wait for a writer) and refuses what is not
// a regular file of at most MaxFileSize, checked on the file opened, not on its name.
func (d boundedDisk) open(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	info, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	switch {
	case !info.Mode().IsRegular():
		f.Close()
		// no hint: kustomize quotes the message inside its own
		return nil, &fault.Input{File: path, Message: fmt.Sprintf("is %s, not a regular file", kindOf(info.Mode()))}
	case info.Size() > MaxFileSize:
		f.Close()
		return nil, tooLarge(path)
	}
	return f, nil
}

func tooLarge(path string) error {
	return &fault.Input{File: path, Message: fmt.Sprintf("is larger than the %d MiB toa-apply reads of a kustomization's file", MaxFileSize>>20)}
}

func kindOf(m fs.FileMode) string {
	switch {
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe"
	case m&fs.ModeDevice != 0 || m&fs.ModeCharDevice != 0:
		return "a device"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m.IsDir():
		return "a folder"
	}
	return "a special file"
}
