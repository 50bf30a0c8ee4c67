package sandbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// spec is what the init reads.
type spec struct {
	Mode     string // modeOverlay, modeCopy, modeChroot or modeProbe
	StatusFd int    // where the init writes its report
	// Lower, Upper, Work and Merged are the overlay's folders; modeCopy's copy is in Upper.
	Lower, Upper, Work, Merged string
	// RefuseOverlay takes overlayfs as refused, without asking the kernel (NoOverlayEnv).
	RefuseOverlay bool
	Network       Network
	Binds         []Bind
	Stage         stageSpec // what the process that becomes the command does
	// HostRoot marks the init of a root runner: root's on the runner, unmapped inside.
	HostRoot bool
	held     held
}

// What the init's report says the runner refused.
const (
	refusedNamespaces = "namespaces"
	refusedOverlay    = "overlay"
	refusedGone       = "gone"
)

// initFailed is the exit code of an init or a stage that could not set the sandbox up.
const initFailed = 125

// gonePrefix begins what is said of a folder a run mounts or binds that is not there: the kernel
// is not the cause, something removed part of the cache (or of the install folder) meanwhile.
const gonePrefix = "gone: "

// Init does the sandbox's work when this process is the re-executed init of a sandbox or the
// process that becomes its command, and never returns then; otherwise it returns at once. Call
// it first in main and in TestMain.
func Init() {
	if len(os.Args) == 0 {
		return
	}
	// both marks: a variable left in a user's environment does not make an init
	switch name := os.Args[0]; name {
	case initName:
		if data, ok := os.LookupEnv(initEnv); ok {
			runtime.LockOSThread() // what a thread holds (capabilities, no_new_privs) is this one's
			os.Unsetenv(initEnv)
			os.Exit(initMain(data))
		}
	case stageName:
		if data, ok := os.LookupEnv(stageEnv); ok {
			runtime.LockOSThread()
			os.Unsetenv(stageEnv)
			stageMain(data)
		}
	}
}

// initMain is the init: it sets the sandbox up, runs the command and reports, and returns its
// exit code.
func initMain(data string) int {
	var s spec
	if err := json.Unmarshal([]byte(data), &s); err != nil {
		fmt.Fprintf(os.Stderr, "toa-push sandbox: read the sandbox's spec: %v\n", err)
		return initFailed
	}
	status := os.NewFile(uintptr(s.StatusFd), "status")
	// what the init inherited reaches no command; the init's own /proc/1 is closed to the
	// command (not dumpable, and the command has no CAP_SYS_PTRACE)
	cloexecFrom(3)
	_ = unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0)
	r := s.main()
	r.Done = true
	if err := json.NewEncoder(status).Encode(r); err != nil {
		fmt.Fprintf(os.Stderr, "toa-push sandbox: report: %v\n", err)
	}
	status.Close()
	if r.Setup != "" {
		return initFailed
	}
	return r.Code
}

func (s *spec) main() report {
	if s.Mode == modeChroot {
		// the command's orphans come to the init, which is no PID namespace's
		if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
			return report{Setup: fmt.Sprintf("become the subreaper of the command's processes: %v", err)}
		}
		return s.supervise(nil)
	}
	root, refused, err := s.enterOnAThread()
	if err != nil {
		if refused == "" && errors.Is(err, unix.ENOENT) {
			refused = refusedGone
		}
		return report{Setup: err.Error(), Refused: refused}
	}
	if s.Mode == modeProbe {
		return report{}
	}
	// the stage starts before the runner's root is left: its program (this one) loads its
	// libraries from there; pivot_root then moves it into the base with the init
	return s.supervise(func() error {
		err := pivot(root)
		s.held.close()
		return err
	})
}

// enterOnAThread is enter, on a thread of its own that ends with it: the file system ids it
// takes (Setfsuid) would make the stage's exec look like a change of ids, which drops the
// capabilities it inherits.
func (s *spec) enterOnAThread() (root, refused string, err error) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		root, refused, err = s.enter()
	}()
	<-done
	return root, refused, err
}

// fdPath is the path of the descriptor fd of this process: a magic link, which leads to what the
// descriptor holds without passing the folders above it.
func fdPath(fd int) string { return fmt.Sprintf("/proc/self/fd/%d", fd) }

// enter makes the sandbox's mounts and returns its root: the overlay over the base's root (or
// the private copy of it), /proc with its kernel knobs read-only or masked, /dev, the binds.
// What the runner refused is said by refused.
func (s *spec) enter() (root, refused string, err error) {
	// the first mount in the namespaces: where it fails, a mount namespace is of no use here
	// (Ubuntu 24.04's AppArmor restriction leaves the user namespace without capabilities, a
	// seccomp profile may refuse mount)
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return "", refusedNamespaces, fmt.Errorf("make the mounts private: %w", err)
	}
	if s.Mode == modeProbe {
		refused, err := s.probe()
		return "", refused, err
	}
	if s.Mode == modeOverlay && s.RefuseOverlay {
		return "", refusedOverlay, fmt.Errorf("the kernel does not let a user namespace mount an overlay over the base: %w (%s=1)", unix.EPERM, NoOverlayEnv)
	}
	if err := s.hold(); err != nil {
		return "", "", err
	}
	if s.HostRoot {
		// held, the folders need no path from here: what the init makes from now on is the
		// sandbox's id's, whom overlayfs wants its mounter to be (an id the namespace maps)
		_ = unix.Setfsuid(0)
		_ = unix.Setfsgid(0)
	}
	if s.Network == NetworkNone {
		if err := loopbackUp(); err != nil {
			return "", "", err
		}
	}
	root, refused, err = s.root()
	if err != nil {
		return "", refused, err
	}
	proc := filepath.Join(root, "proc")
	if err := unix.Mount("proc", proc, "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return "", "", fmt.Errorf("mount /proc: %w", err)
	}
	if err := devices(filepath.Join(root, "dev")); err != nil {
		return "", "", err
	}
	// no user namespace inside: a command cannot make one to mount in (bubblewrap's
	// --disable-userns); the limit is this namespace's own, which its root may set
	_ = os.WriteFile(filepath.Join(proc, "sys", "user", "max_user_namespaces"), []byte("0"), 0)
	if err := confineProc(proc, filepath.Join(root, "dev", "null")); err != nil {
		return "", "", err
	}
	for i, b := range s.Binds {
		if err := bind(root, b, s.held.binds[i]); err != nil {
			return "", "", fmt.Errorf("bind %s at %s: %w", b.Source, b.Target, err)
		}
	}
	return root, "", nil
}

// held are the descriptors of what the init mounts, opened first: the init of a root runner is
// root's on the runner then (unmapped in the namespace), and passes root's home, which the
// sandbox's id may not.
type held struct {
	lower, upper, work int
	binds              []int
}

func (h held) close() {
	for _, fd := range append([]int{h.lower, h.upper, h.work}, h.binds...) {
		if fd > 2 {
			unix.Close(fd)
		}
	}
}

// hold opens the folders and files the init mounts.
func (s *spec) hold() error {
	open := func(what, p string) (int, error) {
		fd, err := unix.Open(p, unix.O_PATH|unix.O_CLOEXEC, 0)
		if err != nil {
			return -1, fmt.Errorf("%s: open %s: %w", what, p, err)
		}
		return fd, nil
	}
	var err error
	if s.Mode == modeOverlay {
		if s.held.lower, err = open("mount an overlay over the base", s.Lower); err != nil {
			return err
		}
		if s.held.work, err = open("mount an overlay over the base", filepath.Dir(s.Merged)); err != nil {
			return err
		}
	}
	if s.held.upper, err = open("open the run's upper folder", s.Upper); err != nil {
		return err
	}
	for _, b := range s.Binds {
		fd, err := open(fmt.Sprintf("bind %s at %s", b.Source, b.Target), b.Source)
		if err != nil {
			return err
		}
		s.held.binds = append(s.held.binds, fd)
	}
	return nil
}

// pivot makes root the root of the init's mount namespace (and of the stage, whose root was the
// runner's) and leaves the runner's.
func pivot(root string) error {
	if err := os.Chdir(root); err != nil {
		return err
	}
	if err := unix.PivotRoot(".", "."); err != nil {
		return fmt.Errorf("pivot into the base: %w", err)
	}
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("leave the runner's root: %w", err)
	}
	return os.Chdir("/")
}

// probe mounts what a run mounts first, /proc of the new PID namespace and a tmpfs, and brings
// up loopback in the new network namespace.
func (s *spec) probe() (string, error) {
	if err := unix.Mount("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return refusedNamespaces, fmt.Errorf("mount /proc: %w", err)
	}
	if err := unix.Mount("tmpfs", "/dev", "tmpfs", unix.MS_NOSUID|unix.MS_NOEXEC, "size=64k"); err != nil {
		return refusedNamespaces, fmt.Errorf("mount a tmpfs: %w", err)
	}
	return "", loopbackUp()
}

// root mounts the root the command runs in and returns where: the overlay, or the copy bound
// on itself (pivot_root wants a mount). Each is reached through the held folder above it, so
// that its path crosses into the mount (a descriptor's magic link leads under a mount made on
// what it holds). An overlay the kernel refuses a user namespace, EPERM where it is turned off
// there, EINVAL where the kernel is older than 5.11 (it knows no userxattr), is said refused.
func (s *spec) root() (string, string, error) {
	if s.Mode == modeCopy {
		cp := filepath.Join(fdPath(s.held.upper), copyDir)
		if err := unix.Mount(cp, cp, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return "", "", fmt.Errorf("bind the copy of the base: %w", err)
		}
		return cp, "", nil
	}
	merged := filepath.Join(fdPath(s.held.work), filepath.Base(s.Merged))
	opts := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s,userxattr",
		fdPath(s.held.lower), fdPath(s.held.upper), filepath.Join(fdPath(s.held.work), filepath.Base(s.Work)))
	err := unix.Mount("overlay", merged, "overlay", 0, opts)
	if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EINVAL) {
		return "", refusedOverlay, fmt.Errorf("the kernel does not let a user namespace mount an overlay over the base: %w", err)
	}
	if err != nil {
		return "", "", fmt.Errorf("mount an overlay over the base (lowerdir=%s, upperdir=%s, workdir=%s): %w", s.Lower, s.Upper, s.Work, err)
	}
	return merged, "", nil
}

// loopbackUp brings up lo, the only interface of a new network namespace.
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("bring up loopback: %w", err)
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("bring up loopback: %w", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("bring up loopback: %w", err)
	}
	return nil
}

// procReadOnly and procMasked are runc's and Docker's defaults: the kernel's knobs a
// container's root may read but not write, and what it may not even read (the kernel's memory,
// its keys, timers and interrupts, which say what the host runs).
var (
	procReadOnly = []string{"bus", "fs", "irq", "sys", "sysrq-trigger"}
	procMasked   = []string{"acpi", "asound", "interrupts", "kcore", "keys", "latency_stats", "sched_debug", "scsi", "timer_list", "timer_stats"}
)

// confineProc makes proc's knobs read-only and masks the rest: a file under /dev/null (null),
// a folder under an empty read-only tmpfs. What this kernel lacks is skipped.
func confineProc(proc, null string) error {
	const procFlags = unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC
	for _, name := range procReadOnly {
		p := filepath.Join(proc, name)
		if err := unix.Mount(p, p, "", unix.MS_BIND|unix.MS_REC, ""); errors.Is(err, unix.ENOENT) {
			continue
		} else if err != nil {
			return fmt.Errorf("make /proc/%s read-only: %w", name, err)
		}
		if err := unix.Mount("", p, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY|procFlags, ""); err != nil {
			return fmt.Errorf("make /proc/%s read-only: %w", name, err)
		}
	}
	for _, name := range procMasked {
		p := filepath.Join(proc, name)
		info, err := os.Lstat(p)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return fmt.Errorf("mask /proc/%s: %w", name, err)
		}
		if info.IsDir() {
			err = unix.Mount("tmpfs", p, "tmpfs", unix.MS_RDONLY|procFlags, "size=0")
		} else {
			err = unix.Mount(null, p, "", unix.MS_BIND, "")
		}
		if err != nil {
			return fmt.Errorf("mask /proc/%s: %w", name, err)
		}
	}
	return nil
}

// devices makes /dev a tmpfs with the devices a build uses, bound from the runner's.
func devices(dev string) error {
	if err := unix.Mount("tmpfs", dev, "tmpfs", unix.MS_NOSUID|unix.MS_NOEXEC, "mode=755,size=65536k"); err != nil {
		return fmt.Errorf("mount /dev: %w", err)
	}
	for _, name := range deviceNames {
		target := filepath.Join(dev, name)
		if err := os.WriteFile(target, nil, 0o666); err != nil {
			return err
		}
		if err := unix.Mount("/dev/"+name, target, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind /dev/%s: %w", name, err)
		}
	}
	for name, target := range deviceLinks {
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

// deviceNames are the devices of a sandbox's /dev, deviceLinks its links.
var (
	deviceNames = []string{"null", "zero", "full", "random", "urandom", "tty"}
	deviceLinks = map[string]string{"fd": "/proc/self/fd", "stdin": "/proc/self/fd/0", "stdout": "/proc/self/fd/1", "stderr": "/proc/self/fd/2"}
)

// bind mounts b.Source, held as the descriptor source, at b.Target inside root, the target
// made (a folder or a file, as the source is) where the base lacks it, resolved inside the root.
func bind(root string, b Bind, source int) error {
	info, err := os.Stat(fdPath(source))
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
	if err := unix.Mount(fdPath(source), fdPath(fd), "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return err
	}
	if !b.ReadOnly {
		return nil
	}
	// the new mount sits on the magic link's target: remount it by its path in the root
	return unix.Mount("", filepath.Join(root, rel), "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_REC, "")
}

// supervise starts the process that becomes the command (the stage), does ready (the pivot
// into the base) and lets it go on, reaps every process that ends in the sandbox (the init is
// the PID namespace's init, or the subreaper of the chroot way's), and when the command ends,
// names and kills what it left. Asked to stop (SIGTERM), or where the sandbox's processes reach
// their bound, it kills them all.
func (s *spec) supervise(ready func() error) report {
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM)
	errR, errW, err := os.Pipe()
	if err != nil {
		return report{Setup: err.Error()}
	}
	goR, goW, err := os.Pipe()
	if err != nil {
		return report{Setup: err.Error()}
	}
	data, err := json.Marshal(s.Stage)
	if err != nil {
		return report{Setup: err.Error()}
	}
	cmd := &exec.Cmd{Path: "/proc/self/exe", Args: []string{stageName}, Env: []string{stageEnv + "=" + string(data)},
		Stdout: os.Stdout, Stderr: os.Stderr, ExtraFiles: []*os.File{errW, goR},
		SysProcAttr: &syscall.SysProcAttr{Setsid: true}}
	if err := cmd.Start(); err != nil {
		return report{Setup: fmt.Sprintf("start the command's process: %v", err)}
	}
	errW.Close()
	goR.Close()
	// the stage says when its program is loaded (its libraries from the runner's root), and
	// waits for ready (the pivot into the base): nothing of the base runs before it confines
	// itself
	stopStage := func(why string, err error) report {
		_ = cmd.Process.Kill()
		_, _ = cmd.Process.Wait()
		r := report{Setup: why}
		if errors.Is(err, unix.ENOENT) {
			r.Refused = refusedGone
		}
		return r
	}
	if loaded, _ := errR.Read(make([]byte, 1)); loaded != 1 {
		return stopStage("the process that becomes the command ended as it started", nil)
	}
	if ready != nil {
		if err := ready(); err != nil {
			return stopStage(err.Error(), err)
		}
	}
	_, _ = goW.Write([]byte{1})
	goW.Close()
	exits := make(chan exited, 16)
	go reap(exits)
	// until it becomes the command, the stage says only what stopped it
	said, _ := io.ReadAll(io.LimitReader(errR, 64<<10))
	errR.Close()
	procs := s.processes()
	var r report
	if len(said) > 0 {
		r.Setup = string(said)
	}
	// at the bound (the kernel refuses the fork past it); at the command's exit, give or take
	// the command itself and a process not yet reaped: a shell whose fork failed there may end
	// at once, its children alive
	reached := func(slack int) bool { return procs.count() >= int(s.Stage.MaxProcesses)-slack }
	tick := time.NewTicker(procs.interval)
	defer tick.Stop()
	killing, atBound := false, 0
	for {
		select {
		case e, ok := <-exits:
			if !ok {
				return r // nothing is left
			}
			if e.pid == cmd.Process.Pid && !killing {
				r.Code = e.code
				r.Processes = reached(2)
				r.Leftovers = procs.names()
				killing = true
				procs.killAll()
			} else if e.pid == cmd.Process.Pid {
				r.Code = e.code
			}
			// while killing, the ticker kills again what was forked meanwhile: not at each exit,
			// which for the chroot way reads all of /proc
		case <-tick.C:
			switch {
			case killing:
				procs.killAll()
			case !reached(0):
				atBound = 0
			case atBound < 1:
				// at the bound for a tick first: the command says what the kernel refused it
				atBound++
			default:
				r.Processes, killing = true, true
				procs.killAll()
			}
		case <-stop:
			killing = true
			procs.killAll()
		}
	}
}

// exited is a process the init reaped, and its exit code (128 + the signal that killed it).
type exited struct{ pid, code int }

// reap waits for every child of the init until none is left, then closes exits.
func reap(exits chan<- exited) {
	defer close(exits)
	for {
		var status unix.WaitStatus
		pid, err := unix.Wait4(-1, &status, 0, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return // ECHILD: nothing is left
		}
		code := status.ExitStatus()
		if status.Signaled() {
			code = 128 + int(status.Signal())
		}
		exits <- exited{pid, code}
	}
}

// cloexecFrom marks every descriptor from first on close-on-exec: close_range, or, before Linux
// 5.11, each of /proc/self/fd.
func cloexecFrom(first int) {
	if unix.CloseRange(uint(first), ^uint(0), unix.CLOSE_RANGE_CLOEXEC) == nil {
		return
	}
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return
	}
	for _, e := range entries {
		var fd int
		if _, err := fmt.Sscan(e.Name(), &fd); err == nil && fd >= first {
			unix.CloseOnExec(fd)
		}
	}
}
