package kustomize

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/toa-deploy/toa-deploy/internal/fault"
)

// A kustomization's files are read only when they are regular files of a bounded size: a named
// pipe, a device or a huge file is refused at once, naming it, and never hangs the render.
func TestOnDiskRefusesWhatIsNotAFile(t *testing.T) {
	for _, tc := range []struct {
		name string
		make func(t *testing.T, path string)
		want string
	}{
		{"a named pipe", func(t *testing.T, path string) {
			if err := syscall.Mkfifo(path, 0o644); err != nil {
				t.Fatal(err)
			}
		}, "is a named pipe, not a regular file"},
		{"a link to /dev/zero", func(t *testing.T, path string) { // kustomize's own root check refuses it first
			if err := os.Symlink("/dev/zero", path); err != nil {
				t.Fatal(err)
			}
		}, "is not in or below"},
		{"a file over the limit", func(t *testing.T, path string) {
			if err := os.WriteFile(path, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Truncate(path, MaxFileSize+1); err != nil { // sparse: no disk used
				t.Fatal(err)
			}
		}, "is larger than the 64 MiB toa-apply reads"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte("resources: [objects.yaml]\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			tc.make(t, filepath.Join(dir, "objects.yaml"))
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, err := Render(ctx, OnDisk(), dir)
			var input *fault.Input
			if !errors.As(err, &input) || !strings.Contains(err.Error(), "objects.yaml") || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want a *fault.Input naming objects.yaml: %s", err, tc.want)
			}
		})
	}
}

// A resource at a URL that never answers ends with the context, as a *fault.Timeout: kustomize
// fetches it with no bound of its own.
func TestRenderEndsWithTheContext(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() { // accept and never answer
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	dir := t.TempDir()
	k := "resources: [http://" + l.Addr().String() + "/objects.yaml]\n"
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	start := time.Now()
	_, err = Render(ctx, OnDisk(), dir)
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("took %s with a 1s context", took)
	}
	if fault.ClassOf(err) != fault.ClassTimeout || !strings.Contains(err.Error(), "remote resource") {
		t.Errorf("got %v (class %v), want a timeout that says a remote resource may be why", err, fault.ClassOf(err))
	}
}
