// Package containerseccomp runs a program under a seccomp filter of the tests' own that refuses
// what a container runtime's default profile refuses a process without CAP_SYS_ADMIN (Docker's
// and containerd's: clone with a namespace flag, unshare, setns, mount and the new mount API,
// umount2, pivot_root, each EPERM; clone3 ENOSYS, so that a C library falls back to clone), so
// that a test runs toa-push as a CI job in such a container runs it, on any machine. A second
// profile lets namespaces be made and refuses mount in them: what a user namespace without
// capabilities (Ubuntu 24.04's kernel.apparmor_restrict_unprivileged_userns) sees.
//
// The filter goes in through the test binary: its TestMain calls Exec first, and Command starts
// the binary again, which installs the filter and execs the program. It imports nothing of this
// project, so that any package's tests can use it.
package containerseccomp

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// env marks the process that installs the filter; its value is the profile.
const env = "TOA_TEST_SECCOMP"

// Profile is what a filter refuses.
type Profile string

const (
	// DenyNamespaces is a container's default profile for a process without CAP_SYS_ADMIN.
	DenyNamespaces Profile = "namespaces"
	// DenyMount refuses mount and the new mount API only: namespaces are made, nothing can be
	// mounted in them.
	DenyMount Profile = "mount"
)

// namespaceFlags are the CLONE_NEW* flags a default profile refuses clone without
// CAP_SYS_ADMIN: Docker's mask 0x7E020000.
const namespaceFlags = unix.CLONE_NEWNS | unix.CLONE_NEWCGROUP | unix.CLONE_NEWUTS | unix.CLONE_NEWIPC |
	unix.CLONE_NEWUSER | unix.CLONE_NEWPID | unix.CLONE_NEWNET

// mountCalls are the system calls that mount, refused by both profiles.
var mountCalls = []uint32{unix.SYS_MOUNT, unix.SYS_UMOUNT2, unix.SYS_PIVOT_ROOT, unix.SYS_FSOPEN, unix.SYS_FSCONFIG,
	unix.SYS_FSMOUNT, unix.SYS_FSPICK, unix.SYS_MOVE_MOUNT, unix.SYS_OPEN_TREE, unix.SYS_MOUNT_SETATTR}

// Command is name run with args under the filter of profile, through this test binary (whose
// TestMain calls Exec). Its environment is this process's.
func Command(ctx context.Context, profile Profile, name string, args ...string) *exec.Cmd {
	return Wrap(exec.CommandContext(ctx, name, args...), profile)
}

// Wrap makes cmd, not started, run its program under the filter of profile, through this test
// binary (whose TestMain calls Exec): its environment (this process's where it has none), its
// folder and its SysProcAttr (another user's credentials) stay. This binary is started as
// /proc/self/exe, which another user can start whatever the folders above it.
func Wrap(cmd *exec.Cmd, profile Profile) *exec.Cmd {
	environ := cmd.Env
	if environ == nil {
		environ = os.Environ()
	}
	cmd.Env = append(environ, env+"="+string(profile))
	cmd.Args = append([]string{"containerseccomp", cmd.Path}, cmd.Args[1:]...)
	cmd.Path = "/proc/self/exe"
	return cmd
}

// Exec installs the filter and execs the program of Command when this process is Command's,
// and never returns then; otherwise it returns at once.
func Exec() {
	profile, ok := os.LookupEnv(env)
	if !ok || len(os.Args) < 2 {
		return
	}
	runtime.LockOSThread() // the filter is the thread's, and the exec is this thread's
	os.Unsetenv(env)
	if err := install(Profile(profile)); err != nil {
		fmt.Fprintf(os.Stderr, "containerseccomp: %v\n", err)
		os.Exit(125)
	}
	program, err := exec.LookPath(os.Args[1])
	if err != nil {
		fmt.Fprintf(os.Stderr, "containerseccomp: %v\n", err)
		os.Exit(127)
	}
	err = syscall.Exec(program, os.Args[1:], os.Environ())
	fmt.Fprintf(os.Stderr, "containerseccomp: exec %s: %v\n", program, err)
	os.Exit(126)
}

// install puts this thread under profile's filter. Root installs it as a container runtime does,
// without no_new_privs; anyone else must set it first.
func install(profile Profile) error {
	prog, err := program(profile)
	if err != nil {
		return err
	}
	if os.Geteuid() != 0 {
		if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
			return fmt.Errorf("set no_new_privs: %w", err)
		}
	}
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	if err := unix.Prctl(unix.PR_SET_SECCOMP, unix.SECCOMP_MODE_FILTER, uintptr(unsafe.Pointer(&fprog)), 0, 0); err != nil {
		return fmt.Errorf("install the seccomp filter: %w", err)
	}
	return nil
}

// program is the filter's BPF: over struct seccomp_data (nr at 0, arch at 4, args[0] at 16).
func program(profile Profile) ([]unix.SockFilter, error) {
	arch, ok := map[string]uint32{"amd64": unix.AUDIT_ARCH_X86_64, "arm64": unix.AUDIT_ARCH_AARCH64}[runtime.GOARCH]
	if !ok {
		return nil, fmt.Errorf("no seccomp filter for %s", runtime.GOARCH)
	}
	const (
		ld    = unix.BPF_LD | unix.BPF_W | unix.BPF_ABS
		jeq   = unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K
		jset  = unix.BPF_JMP | unix.BPF_JSET | unix.BPF_K
		ret   = unix.BPF_RET | unix.BPF_K
		allow = unix.SECCOMP_RET_ALLOW
	)
	errno := func(e syscall.Errno) uint32 { return unix.SECCOMP_RET_ERRNO | uint32(e) }
	p := []unix.SockFilter{
		{Code: ld, K: 4},
		{Code: jeq, Jt: 1, K: arch}, // another ABI (x32, a compat call): allowed, as nothing here uses one
		{Code: ret, K: allow},
		{Code: ld, K: 0},
	}
	refuse := func(nr uint32, e syscall.Errno) {
		p = append(p, unix.SockFilter{Code: jeq, Jf: 1, K: nr}, unix.SockFilter{Code: ret, K: errno(e)})
	}
	for _, nr := range mountCalls {
		refuse(nr, unix.EPERM)
	}
	switch profile {
	case DenyMount:
	case DenyNamespaces:
		refuse(unix.SYS_CLONE3, unix.ENOSYS)
		refuse(unix.SYS_UNSHARE, unix.EPERM)
		refuse(unix.SYS_SETNS, unix.EPERM)
		p = append(p,
			unix.SockFilter{Code: jeq, Jf: 3, K: unix.SYS_CLONE},
			unix.SockFilter{Code: ld, K: 16}, // clone's flags, args[0] (its low half)
			unix.SockFilter{Code: jset, Jf: 1, K: namespaceFlags},
			unix.SockFilter{Code: ret, K: errno(unix.EPERM)})
	default:
		return nil, fmt.Errorf("no seccomp profile %q: want %s", profile, strings.Join([]string{string(DenyNamespaces), string(DenyMount)}, " or "))
	}
	return append(p, unix.SockFilter{Code: ret, K: allow}), nil
}
