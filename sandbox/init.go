package sandbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Init does the sandbox's work when this process is the re-executed init of a sandbox, and
// never returns then; otherwise it returns at once. Call it first in main and in TestMain.
func Init() {
	data, ok := os.LookupEnv(initEnv)
	if !ok || len(os.Args) == 0 || os.Args[0] != initName {
		return // both marks: a variable left in a user's environment does not make an init
	}
	var s spec
	if err := json.Unmarshal([]byte(data), &s); err != nil {
		fail("read the sandbox's spec: %v", err)
	}
	os.Unsetenv(initEnv)
	if s.Probe {
		os.Exit(0)
	}
	if err := s.enter(); err != nil {
		if errors.Is(err, unix.ENOENT) {
			fail(gonePrefix+"%v", err)
		}
		fail("%v", err)
	}
	os.Exit(s.run())
}

// initFailed is the exit code of an init that could not set the sandbox up; its last line of
// stderr, after initPrefix, says why.
const initFailed = 125

const initPrefix = "toa-push sandbox: "

// refusedPrefix begins what an init says when the kernel refused it overlayfs: Run then runs
// the command on a private copy of the root.
const refusedPrefix = "overlayfs refused: "

// gonePrefix begins what an init says when a folder it mounts or binds is not there: the kernel
// is not the cause, something removed part of the cache (or of the install folder) meanwhile.
const gonePrefix = "gone: "

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, initPrefix+format+"\n", args...)
	os.Exit(initFailed)
}

// enter lays the overlay over the base's root (or binds the private copy of it), binds in what
// the command needs and pivots into it.
func (s *spec) enter() error {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make the mounts private: %w", err)
	}
	root, err := s.root()
	if err != nil {
		return err
	}
	if err := unix.Mount("proc", filepath.Join(root, "proc"), "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("mount /proc: %w", err)
	}
	if err := devices(filepath.Join(root, "dev")); err != nil {
		return err
	}
	for _, b := range s.Binds {
		if err := bind(root, b); err != nil {
			return fmt.Errorf("bind %s at %s: %w", b.Source, b.Target, err)
		}
	}
	if err := os.Chdir(root); err != nil {
		return err
	}
	if err := unix.PivotRoot(".", "."); err != nil {
		return fmt.Errorf("pivot into the base: %w", err)
	}
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("leave the runner's root: %w", err)
	}
	dir := s.Dir
	if dir == "" {
		dir = "/"
	}
	// made where the root lacks it, as a Dockerfile's WORKDIR makes it
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("make the working folder %s: %w", dir, err)
	}
	return os.Chdir(dir)
}

// root mounts the root the command runs in and returns where: the overlay, or the copy bound
// on itself (pivot_root wants a mount). An overlay the kernel refuses a user namespace, EPERM
// where it is turned off there, EINVAL where the kernel is older than 5.11 (it knows no
// userxattr), is said with refusedPrefix.
func (s *spec) root() (string, error) {
	if s.Copy != "" {
		if err := unix.Mount(s.Copy, s.Copy, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return "", fmt.Errorf("bind the copy of the base: %w", err)
		}
		return s.Copy, nil
	}
	// the folders by descriptor: a comma or a colon in a path (a TOA_CACHE of the user's) would
	// end an option or a lower folder in overlayfs's options
	var dirs [3]string
	for i, dir := range []string{s.Lower, s.Upper, s.Work} {
		fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return "", fmt.Errorf("open %s for the overlay: %w", dir, err)
		}
		defer unix.Close(fd)
		dirs[i] = fmt.Sprintf("/proc/self/fd/%d", fd)
	}
	opts := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s,userxattr", dirs[0], dirs[1], dirs[2])
	var err error
	if s.RefuseOverlay {
		err = fmt.Errorf("%w (%s=1)", unix.EPERM, NoOverlayEnv)
	} else {
		err = unix.Mount("overlay", s.Merged, "overlay", 0, opts)
	}
	if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EINVAL) {
		return "", fmt.Errorf("%sthe kernel does not let a user namespace mount an overlay over the base: %w", refusedPrefix, err)
	}
	if err != nil {
		return "", fmt.Errorf("mount an overlay over the base (lowerdir=%s, upperdir=%s, workdir=%s): %w", s.Lower, s.Upper, s.Work, err)
	}
	return s.Merged, nil
}

// devices makes /dev a tmpfs with the devices a build uses, bound from the runner's.
func devices(dev string) error {
	if err := unix.Mount("tmpfs", dev, "tmpfs", unix.MS_NOSUID|unix.MS_NOEXEC, "mode=755,size=65536k"); err != nil {
		return fmt.Errorf("mount /dev: %w", err)
	}
	for _, name := range []string{"null", "zero", "full", "random", "urandom", "tty"} {
		target := filepath.Join(dev, name)
		if err := os.WriteFile(target, nil, 0o666); err != nil {
			return err
		}
		if err := unix.Mount("/dev/"+name, target, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind /dev/%s: %w", name, err)
		}
	}
	for name, target := range map[string]string{"fd": "/proc/self/fd", "stdin": "/proc/self/fd/0", "stdout": "/proc/self/fd/1", "stderr": "/proc/self/fd/2"} {
		if err := os.Symlink(target, filepath.Join(dev, name)); err != nil {
			return err
		}
	}
	shm := filepath.Join(dev, "shm")
	if err := os.Mkdir(shm, 0o1777); err != nil {
		return err
	}
	return unix.Mount("tmpfs", shm, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=1777,size=65536k")
}

// bind mounts b.Source at b.Target inside root, the target made (a folder or a file, as the
// source is) where the base lacks it, resolved inside the root.
func bind(root string, b Bind) error {
	info, err := os.Stat(b.Source)
	if err != nil {
		return err
	}
	rootFd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(rootFd)
	x := &extractor{root: rootFd}
	rel := clean(b.Target)
	var fd int
	if info.IsDir() {
		fd, err = x.mkdirAll(rel)
	} else {
		if err = x.mountPoint(rel, false); err == nil {
			fd, err = unix.Openat2(rootFd, rel, &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC | unix.O_NOFOLLOW,
				Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS})
		}
	}
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	target := fmt.Sprintf("/proc/self/fd/%d", fd)
	if err := unix.Mount(b.Source, target, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return err
	}
	if !b.ReadOnly {
		return nil
	}
	// the new mount sits on the magic link's target: remount it by its path in the root
	return unix.Mount("", filepath.Join(root, rel), "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_REC, "")
}

// run starts the command, reaps every process orphaned inside (this is the PID namespace's
// init) and returns the command's exit code.
func (s *spec) run() int {
	if len(s.Args) == 0 {
		fail("no command")
	}
	program, err := lookPath(s.Args[0], s.Env)
	if err != nil {
		fmt.Fprintf(os.Stderr, "%v\n", err)
		return 127
	}
	cmd := exec.Command(program, s.Args[1:]...)
	cmd.Args[0] = s.Args[0]
	cmd.Env = s.Env
	cmd.Stdin, cmd.Stdout, cmd.Stderr = nil, os.Stdout, os.Stderr
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", s.Args[0], err)
		return 126
	}
	main := cmd.Process.Pid
	code := 0
	for {
		var status syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &status, 0, nil)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			break // ECHILD: nothing is left
		}
		if pid == main {
			switch {
			case status.Exited():
				code = status.ExitStatus()
			case status.Signaled():
				code = 128 + int(status.Signal())
			}
		}
	}
	return code
}

// lookPath finds name in the PATH of env, inside the new root.
func lookPath(name string, env []string) (string, error) {
	if strings.Contains(name, "/") {
		return name, nil
	}
	pathList := "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	for _, e := range env {
		if v, ok := strings.CutPrefix(e, "PATH="); ok {
			pathList = v
		}
	}
	for _, dir := range filepath.SplitList(pathList) {
		p := path.Join(dir, name)
		if info, err := os.Stat(p); err == nil && !info.IsDir() && info.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s: not found in the base (PATH=%s)", name, pathList)
}
