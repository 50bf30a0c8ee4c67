package harness

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
)

// Unpack writes the image's file system (its layers flattened, whiteouts applied) into a new
// temporary folder and returns the folder. Owners are kept when the test runs as root.
func Unpack(t testing.TB, img v1.Image) string {
	t.Helper()
	root := t.TempDir()
	rc := mutate.Extract(img)
	defer rc.Close()
	if err := unpackTar(root, tar.NewReader(rc)); err != nil {
		t.Fatalf("unpack the image: %v", err)
	}
	return root
}

func unpackTar(root string, tr *tar.Reader) error {
	asRoot := os.Geteuid() == 0
	var dirs []*tar.Header // modes set last, as entries come top layer first
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
		rel := path.Clean("/" + hdr.Name)
		if rel == "/" {
			continue
		}
		target := filepath.Join(root, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
			return err
		}
		switch hdr.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(target, 0o755); err != nil {
				return err
			}
			dirs = append(dirs, hdr)
		case tar.TypeReg:
			f, err := os.OpenFile(target, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
			if err != nil {
				return err
			}
			_, err = io.Copy(f, tr)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return fmt.Errorf("%s: %w", rel, err)
			}
			if err := os.Chmod(target, hdr.FileInfo().Mode()); err != nil {
				return err
			}
		case tar.TypeSymlink:
			if err := os.Symlink(hdr.Linkname, target); err != nil {
				return err
			}
		case tar.TypeLink:
			if err := os.Link(filepath.Join(root, filepath.FromSlash(path.Clean("/"+hdr.Linkname))), target); err != nil {
				return err
			}
		default:
			continue // devices and fifos are not made
		}
		if asRoot {
			if err := os.Lchown(target, hdr.Uid, hdr.Gid); err != nil {
				return err
			}
		}
	}
	for _, hdr := range dirs {
		target := filepath.Join(root, filepath.FromSlash(path.Clean("/"+hdr.Name)))
		if err := os.Chmod(target, hdr.FileInfo().Mode()&(fs.ModePerm|fs.ModeSticky|fs.ModeSetuid|fs.ModeSetgid)); err != nil {
			return err
		}
	}
	return nil
}

// Chroot runs a command of an image unpacked at root (see Unpack) in a chroot, as root, with
// the config's Env and WorkingDir ("/" when it has none), and returns what it printed and its
// exit code. The command is the config's Entrypoint followed by args, or by its Cmd when no args
// are given, as a container runtime would run it (exec form: no shell). A command without a
// slash is looked up on the config's PATH inside root; one not found gives code 127. The test
// must run as root (CI does); the command is killed after two minutes.
func Chroot(t testing.TB, root string, cfg v1.Config, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	argv := append([]string{}, cfg.Entrypoint...)
	if len(args) > 0 {
		argv = append(argv, args...)
	} else {
		argv = append(argv, cfg.Cmd...)
	}
	if len(argv) == 0 {
		t.Fatalf("chroot %s: the image has no command and none was given", root)
	}
	if os.Geteuid() != 0 {
		t.Fatalf("chroot %s: the tests must run as root to chroot (they do in CI and `make test` as root)", root)
	}
	program := argv[0]
	if !strings.Contains(program, "/") {
		found, ok := lookPathIn(root, cfg.Env, program)
		if !ok {
			return "", fmt.Sprintf("exec: %q: not found on the image's PATH", program), 127
		}
		program = found
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, program, argv[1:]...)
	cmd.Path, cmd.Args[0] = program, argv[0] // resolved inside the chroot, not here
	cmd.Env = cfg.Env
	cmd.Dir = cfg.WorkingDir
	if cmd.Dir == "" {
		cmd.Dir = "/"
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: root} // chroot, then chdir to Dir
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit):
		code = exit.ExitCode()
	default:
		t.Fatalf("chroot %s %s: %v", root, strings.Join(argv, " "), err)
	}
	return out.String(), errOut.String(), code
}

// lookPathIn finds a program on the PATH of env inside root, as exec would after the chroot.
func lookPathIn(root string, env []string, program string) (string, bool) {
	for _, kv := range env {
		if !strings.HasPrefix(kv, "PATH=") {
			continue
		}
		for _, dir := range filepath.SplitList(strings.TrimPrefix(kv, "PATH=")) {
			candidate := path.Join("/", dir, program)
			fi, err := os.Lstat(filepath.Join(root, filepath.FromSlash(candidate)))
			if err == nil && (fi.Mode()&fs.ModeSymlink != 0 || (fi.Mode().IsRegular() && fi.Mode()&0o111 != 0)) {
				return candidate, true
			}
		}
	}
	return "", false
}
