package sandbox

import (
	"encoding/json"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// The stage is the process that becomes the command: the init starts it (toa-push again, marked
// by its argv[0] and its variable), it takes from itself everything the command must not have,
// and execs the command, so that nothing of it runs before that is done. The init stays as it is:
// a limit on processes set in the init would stop the Go runtime's own threads.
const (
	stageName = "toa-sandbox-exec"
	stageEnv  = "TOA_SANDBOX_EXEC"
)

// stageSpec is what the stage does.
type stageSpec struct {
	Args, Env []string
	Dir       string
	// Chroot, the chroot way, is the root to chroot into; UID and GID the ids to become there.
	Chroot   string `json:",omitempty"`
	UID, GID int
	// MaxProcesses and MaxFileSize are RLIMIT_NPROC and RLIMIT_FSIZE.
	MaxProcesses, MaxFileSize uint64
}

// commandCaps are the capabilities the command keeps in its user namespace: Docker's default
// set, which a `docker build` RUN line has, so that a script that expects root's powers over its
// own files works. Inside a user namespace of one id they reach nothing else: the files of other
// owners, other processes, the runner's network and its devices are not the namespace's. Gone:
// CAP_SYS_ADMIN (mount), CAP_SYS_PTRACE (the init's /proc/1), CAP_NET_ADMIN, CAP_SYS_RESOURCE
// (the limits), and the rest.
var commandCaps = []int{
	unix.CAP_CHOWN, unix.CAP_DAC_OVERRIDE, unix.CAP_FSETID, unix.CAP_FOWNER, unix.CAP_MKNOD,
	unix.CAP_NET_RAW, unix.CAP_SETGID, unix.CAP_SETUID, unix.CAP_SETFCAP, unix.CAP_SETPCAP,
	unix.CAP_NET_BIND_SERVICE, unix.CAP_SYS_CHROOT, unix.CAP_KILL, unix.CAP_AUDIT_WRITE,
}

// stageMain waits for the init (descriptor 4), confines this process and execs the command; it
// never returns. What stops it before the command runs is written on descriptor 3, which closes
// on exec: the init reads it.
func stageMain(data string) {
	setup, ready := os.NewFile(3, "setup"), os.NewFile(4, "ready")
	_, _ = setup.Write([]byte{1}) // loaded: the init may leave the runner's root
	var s stageSpec
	if err := json.Unmarshal([]byte(data), &s); err != nil {
		fmt.Fprintf(setup, "read the command's spec: %v", err)
		os.Exit(initFailed)
	}
	// the init pivots into the base meanwhile, and says when it is done
	if n, _ := ready.Read(make([]byte, 1)); n != 1 {
		os.Exit(initFailed)
	}
	ready.Close()
	if err := s.confine(); err != nil {
		fmt.Fprintf(setup, "%v", err)
		os.Exit(initFailed)
	}
	dir := s.Dir
	if dir == "" {
		dir = "/"
	}
	// made where the root lacks it, as a Dockerfile's WORKDIR makes it
	if err := os.MkdirAll(dir, 0o755); err != nil {
		fmt.Fprintf(setup, "make the working folder %s: %v", dir, err)
		os.Exit(initFailed)
	}
	if err := os.Chdir(dir); err != nil {
		fmt.Fprintf(setup, "enter the working folder %s in the base: %v", dir, err)
		os.Exit(initFailed)
	}
	if len(s.Args) == 0 {
		fmt.Fprintf(setup, "no command")
		os.Exit(initFailed)
	}
	program, err := lookPath(s.Args[0], s.Env)
	if err != nil {
		fmt.Fprintf(os.Stderr, "%v\n", err)
		os.Exit(127)
	}
	err = syscall.Exec(program, s.Args, s.Env)
	fmt.Fprintf(os.Stderr, "%s: %v\n", s.Args[0], err)
	os.Exit(126)
}

// confine takes from this process all the command must not have: the descriptors it inherited,
// the session keyring of the runner's, the root of the runner (the chroot way), root itself
// (the chroot way: the sandbox's id), the capabilities beyond commandCaps (none the chroot way),
// the means to gain privileges (no_new_privs), and it bounds processes, file size and core dumps.
func (s *stageSpec) confine() error {
	cloexecFrom(3)
	if s.Chroot != "" {
		if err := unix.Chroot(s.Chroot); err != nil {
			return fmt.Errorf("chroot into the copy of the base: %w", err)
		}
		if err := os.Chdir("/"); err != nil {
			return err
		}
	}
	// a keyring of its own: the runner's session keyring is not the command's (runc does the
	// same); refused under a container's default seccomp profile, where keyctl is no one's
	_, _, _ = unix.Syscall(unix.SYS_KEYCTL, unix.KEYCTL_JOIN_SESSION_KEYRING, 0, 0)
	for _, l := range []struct {
		resource int
		value    uint64
		name     string
	}{
		{unix.RLIMIT_NPROC, s.MaxProcesses, "processes"},
		{unix.RLIMIT_FSIZE, s.MaxFileSize, "file size"},
		{unix.RLIMIT_CORE, 0, "core dumps"}, // a dump in the working folder would land in the layer
	} {
		if err := lowerLimit(l.resource, l.value); err != nil {
			return fmt.Errorf("bound the command's %s: %w", l.name, err)
		}
	}
	keep := commandCaps
	if s.Chroot != "" {
		keep = nil
	}
	if err := dropBounding(keep); err != nil {
		return err
	}
	switch {
	case s.Chroot != "":
		if err := becomeID(s.UID, s.GID); err != nil {
			return err
		}
	case os.Getuid() != 0:
		// the init of a root runner is root's on the runner, which the namespace does not map:
		// the command is the namespace's root, the sandbox's id, without root's groups
		if err := becomeRoot(); err != nil {
			return err
		}
		fallthrough
	default:
		if err := setCapabilities(keep); err != nil {
			return err
		}
	}
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil && err != unix.EINVAL {
		return fmt.Errorf("clear the ambient capabilities: %w", err)
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("set no_new_privs: %w", err)
	}
	if s.Chroot != "" {
		// no PID namespace ends the command with the init: the kernel does, on the init's death
		// (set after the change of ids, which clears it)
		if err := unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(unix.SIGKILL), 0, 0, 0); err != nil {
			return fmt.Errorf("set the parent-death signal: %w", err)
		}
	}
	return nil
}

// lowerLimit sets a resource's soft and hard limits to value, or leaves a lower hard limit.
func lowerLimit(resource int, value uint64) error {
	var l unix.Rlimit
	if err := unix.Getrlimit(resource, &l); err != nil {
		return err
	}
	value = min(value, l.Max)
	return unix.Setrlimit(resource, &unix.Rlimit{Cur: value, Max: value})
}

// dropBounding takes every capability but keep out of this thread's bounding set, so that no
// program the command runs gets another.
func dropBounding(keep []int) error {
	kept := map[int]bool{}
	for _, c := range keep {
		kept[c] = true
	}
	for c := 0; c <= 63; c++ {
		if kept[c] {
			continue
		}
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err == unix.EINVAL {
			break // past the kernel's last capability
		} else if err != nil {
			return fmt.Errorf("drop capability %d from the bounding set: %w", c, err)
		}
	}
	return nil
}

// setCapabilities makes this thread's permitted and effective sets keep, its inheritable set
// empty: what a program exec'd as root inside then gets is the bounding set.
func setCapabilities(keep []int) error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	for _, c := range keep {
		data[c/32].Permitted |= 1 << (uint(c) % 32)
		data[c/32].Effective |= 1 << (uint(c) % 32)
	}
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("cut the command's capabilities: %w", err)
	}
	return nil
}

// becomeID makes this process the sandbox's id, without groups: the change from root clears
// every capability. The inheritable set is emptied first, as a container's root may hold one.
func becomeID(uid, gid int) error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("read the capabilities: %w", err)
	}
	data[0].Inheritable, data[1].Inheritable = 0, 0
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("empty the inheritable capabilities: %w", err)
	}
	if err := syscall.Setgroups(nil); err != nil {
		return fmt.Errorf("drop the supplementary groups: %w", err)
	}
	if err := syscall.Setresgid(gid, gid, gid); err != nil {
		return fmt.Errorf("become the sandbox's group %d: %w", gid, err)
	}
	if err := syscall.Setresuid(uid, uid, uid); err != nil {
		return fmt.Errorf("become the sandbox's user %d: %w", uid, err)
	}
	return nil
}

// becomeRoot makes this process the root of its user namespace, without groups.
func becomeRoot() error {
	if err := syscall.Setgroups(nil); err != nil {
		return fmt.Errorf("leave the runner's groups: %w", err)
	}
	if err := syscall.Setresgid(0, 0, 0); err != nil {
		return fmt.Errorf("become the sandbox's root group: %w", err)
	}
	if err := syscall.Setresuid(0, 0, 0); err != nil {
		return fmt.Errorf("become the sandbox's root: %w", err)
	}
	return nil
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
