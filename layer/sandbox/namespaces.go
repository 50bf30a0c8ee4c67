package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// runNamespaces runs c in new namespaces, over an overlay of c.Root (modeOverlay) or on the
// private copy of it in c.Upper (modeCopy).
func runNamespaces(ctx context.Context, c Command, ids IDs, mode string) error {
	s := spec{Mode: mode, Upper: c.Upper, Network: c.Network, RefuseOverlay: os.Getenv(NoOverlayEnv) == "1", HostRoot: ids.Root}
	if mode == modeOverlay {
		// the copy of modeCopy was made the sandbox's, whole
		if err := ids.Own(c.Upper); err != nil {
			return gone(c, "give the run's upper folder to the sandbox's user", err)
		}
		if ids.Root && exists(c.Root) && !ids.owns(c.Root) {
			// a root unpacked by another program, or before toa-push gave roots to the sandbox
			if err := ids.Own(c.Root); err != nil {
				return gone(c, "mount an overlay over the base: give its root to the sandbox's user", err)
			}
		}
		work, err := os.MkdirTemp(filepath.Dir(c.Upper), ".work-")
		if err != nil {
			return fmt.Errorf("make the overlay's work folder: %w", err)
		}
		defer removeAll(work)
		s.Lower, s.Work, s.Merged = c.Root, filepath.Join(work, "work"), filepath.Join(work, "merged")
		for _, d := range []string{s.Work, s.Merged} {
			if err := os.Mkdir(d, 0o755); err != nil {
				return err
			}
		}
		if err := ids.Own(work); err != nil {
			return err
		}
	}
	s.Binds = append(runnerBinds(), c.Binds...)
	for _, b := range s.Binds {
		if err := ids.prepareBind(b); err != nil {
			return gone(c, fmt.Sprintf("bind %s at %s", b.Source, b.Target), err)
		}
	}
	s.Stage = c.stage()
	return supervise(ctx, c, s, namespaces(ids, c.Network), writableSources(c.Upper, s.Binds))
}

// gone is the runner's error of a folder the run needs that it cannot open: one removed under
// the run (ENOENT) says so, with the hint to remove the root; anything else is said as it is.
func gone(c Command, what string, err error) error {
	if errors.Is(err, os.ErrNotExist) {
		return setupError(c, gonePrefix+fmt.Sprintf("%s: %v", what, err))
	}
	return fmt.Errorf("%s: %w", what, err)
}

// stage is what the init hands the process that becomes the command.
func (c Command) stage() stageSpec {
	return stageSpec{Args: c.Args, Env: c.Env, Dir: c.Dir, MaxProcesses: uint64(c.MaxProcesses), MaxFileSize: uint64(c.MaxFileSize)}
}

// writableSources are the folders a run writes into on the runner: Upper and the writable binds.
func writableSources(upper string, binds []Bind) []watched {
	out := []watched{{Source: upper, Target: "/"}}
	for _, b := range binds {
		if !b.ReadOnly {
			out = append(out, watched{Source: b.Source, Target: b.Target})
		}
	}
	return out
}

// prepareBind gives a bind's source to the sandbox's id where it must: a writable one whole (the
// sandbox writes as that id), a read-only one where the id could not read it otherwise (a folder
// of toa-push's own, made 0700). The runner's files are readable and stay as they are.
func (ids IDs) prepareBind(b Bind) error {
	if !ids.Root {
		return nil
	}
	if !b.ReadOnly {
		return ids.Own(b.Source)
	}
	readable, err := readableByOthers(b.Source)
	if err != nil || readable {
		return err
	}
	return ids.Own(b.Source)
}

// readableByOthers reports whether every entry under p (p itself too) can be read by any user:
// files o+r, folders o+rx. Links are not followed, except p itself.
func readableByOthers(p string) (bool, error) {
	info, err := os.Stat(p)
	if err != nil {
		return false, err
	}
	if !info.IsDir() {
		return info.Mode().Perm()&0o004 != 0, nil
	}
	readable := true
	err = filepath.WalkDir(p, func(q string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type()&os.ModeSymlink != 0 {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		want := os.FileMode(0o004)
		if d.IsDir() {
			want = 0o005
		}
		if info.Mode().Perm()&want != want {
			readable = false
			return filepath.SkipAll
		}
		return nil
	})
	return readable, err
}

// namespaces are the sandbox's: user (the sandbox's id as root inside, one id: no newuidmap,
// no setuid helper), mount, PID, UTS, IPC, and network where it has loopback alone.
func namespaces(ids IDs, network Network) *syscall.SysProcAttr {
	flags := uintptr(syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS | syscall.CLONE_NEWPID | syscall.CLONE_NEWUTS | syscall.CLONE_NEWIPC)
	if network == NetworkNone {
		flags |= syscall.CLONE_NEWNET
	}
	attr := &syscall.SysProcAttr{
		Cloneflags:  flags,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: ids.UID, Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: ids.GID, Size: 1}},
		Pdeathsig:   syscall.SIGKILL,
	}
	if ids.Root {
		// the init stays root's on the runner (unmapped inside), with every capability in its
		// namespaces (ambient, kept across its exec): it reaches the cache under root's home,
		// which the sandbox's id may not pass, to mount it; the stage becomes the namespace's
		// root, the sandbox's id, before the command runs
		attr.AmbientCaps = allCapabilities()
		attr.GidMappingsEnableSetgroups = true // so that the stage may leave root's groups
	}
	return attr
}

// startError is the error of an init that could not be started with attr: its namespaces
// refused (EPERM from a seccomp profile or a sysctl, ENOSPC where max_user_namespaces is 0,
// EINVAL or EACCES from a map the kernel refuses) are namespacesRefused, which Run answers with
// the chroot way or the runner's error.
func startError(c Command, attr *syscall.SysProcAttr, err error) error {
	refused := errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EINVAL) ||
		errors.Is(err, syscall.EACCES) || errors.Is(err, syscall.ENOSYS)
	if attr.Cloneflags != 0 && refused {
		return &namespacesRefused{why: namespacesCause(err)}
	}
	return fmt.Errorf("start the sandbox for %s: %w", c.Platform, err)
}

// namespacesCause says why this runner makes no user namespace, with the setting that says so.
func namespacesCause(err error) string {
	why := "it does not let toa-push make user namespaces"
	switch {
	case sysctlIs("/proc/sys/user/max_user_namespaces", "0"):
		why += " (user.max_user_namespaces is 0)"
	case sysctlIs("/proc/sys/kernel/unprivileged_userns_clone", "0") && os.Geteuid() != 0:
		why += " (kernel.unprivileged_userns_clone is 0)"
	case sysctlIs("/proc/sys/kernel/apparmor_restrict_unprivileged_userns", "1") && os.Geteuid() != 0:
		why += " (kernel.apparmor_restrict_unprivileged_userns is 1)"
	case seccompFiltered():
		why += " (a seccomp filter refuses them, as a container's default profile does without CAP_SYS_ADMIN)"
	}
	return fmt.Sprintf("%s: %v", why, err)
}

func sysctlIs(file, value string) bool {
	data, err := os.ReadFile(file)
	return err == nil && strings.TrimSpace(string(data)) == value
}

// seccompFiltered reports whether this process runs under a seccomp filter.
func seccompFiltered() bool {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "Seccomp:"); ok {
			return strings.TrimSpace(v) == "2"
		}
	}
	return false
}

// NoNamespacesError is the runner's error where no namespace can be made and toa-push is not
// root (issue 36): the three ways out.
func noNamespacesError(platform, why string) *RunnerError {
	who := fmt.Sprintf("toa-push runs as user %d, not root, so it", os.Geteuid())
	if os.Geteuid() == 0 {
		who = "toa-push is root of a user namespace that maps no other user, so it"
	}
	return &RunnerError{Platform: platform,
		Message: fmt.Sprintf("%s, and %s cannot run the base's programs chrooted as another user instead", why, who),
		Hint: "run the job as root in its container (scripts then run chrooted in a private copy of the base as an unprivileged user); " +
			"or allow user namespaces on the runner (sudo sysctl -w user.max_user_namespaces=15000 kernel.unprivileged_userns_clone=1; " +
			"on Ubuntu 24.04 the AppArmor profile for toa-push that README's \"On the CI runners people use\" gives, " +
			"or sudo sysctl -w kernel.apparmor_restrict_unprivileged_userns=0); " +
			"or pass --scripts-on-runner, which runs the scripts on the runner, where they can read the runner's files"}
}

// CheckUserNamespaces says whether a run in a base of platform can happen on this runner, before
// any work: it starts the sandbox's init in the namespaces a run makes, with the ids a run maps,
// and has it mount in them (/proc and a tmpfs), which is what a seccomp profile that refuses
// mount, or Ubuntu 24.04's AppArmor restriction (a user namespace made, without capabilities),
// refuses. Where that fails, a root runner that can run the command chrooted (canChroot) passes;
// any other gets Run's *RunnerError.
func CheckUserNamespaces(ctx context.Context, platform string) error {
	ids := SandboxIDs()
	if os.Getenv(NoNamespacesEnv) == "1" {
		return canChroot(platform, ids, noNamespacesHook.why)
	}
	err := supervise(ctx, Command{Platform: platform, Timeout: probeTimeout}.withDefaults(), spec{Mode: modeProbe}, namespaces(ids, NetworkNone), nil)
	var none *namespacesRefused
	if !errors.As(err, &none) {
		return err
	}
	return canChroot(platform, ids, none.why)
}

// canChroot says whether this runner, where no namespace can be made for why, can run a command
// chrooted in a private copy of the root as the sandbox's id: root, with the capabilities that
// takes (a container's default set has them all).
func canChroot(platform string, ids IDs, why string) error {
	if !ids.Root {
		return noNamespacesError(platform, why)
	}
	var missing []string
	for _, c := range chrootCaps {
		if !hasCapability(c.cap) {
			missing = append(missing, c.name)
		}
	}
	if len(missing) > 0 {
		return &RunnerError{Platform: platform,
			Message: fmt.Sprintf("%s, and toa-push, root here, lacks %s to run the base's programs chrooted as another user instead", why, strings.Join(missing, ", ")),
			Hint:    "give the job's container the default capabilities (Docker's and containerd's have them all), or allow user namespaces on the runner"}
	}
	return nil
}

// chrootCaps are what a run chrooted in a copy takes of root: chroot, become the sandbox's id,
// give the copy to it, make its devices, and write into folders the id owns.
var chrootCaps = []struct {
	cap  int
	name string
}{
	{unix.CAP_SYS_CHROOT, "CAP_SYS_CHROOT"}, {unix.CAP_SETUID, "CAP_SETUID"}, {unix.CAP_SETGID, "CAP_SETGID"},
	{unix.CAP_CHOWN, "CAP_CHOWN"}, {unix.CAP_MKNOD, "CAP_MKNOD"}, {unix.CAP_DAC_OVERRIDE, "CAP_DAC_OVERRIDE"},
	{unix.CAP_FOWNER, "CAP_FOWNER"}, {unix.CAP_SETPCAP, "CAP_SETPCAP"},
}

// allCapabilities are every capability this kernel knows.
func allCapabilities() []uintptr {
	last := 40 // CAP_CHECKPOINT_RESTORE, Linux 5.9
	if data, err := os.ReadFile("/proc/sys/kernel/cap_last_cap"); err == nil {
		if n, err := strconv.Atoi(strings.TrimSpace(string(data))); err == nil {
			last = n
		}
	}
	caps := make([]uintptr, last+1)
	for i := range caps {
		caps[i] = uintptr(i)
	}
	return caps
}

// hasCapability reports whether this process has cap in its effective set.
func hasCapability(cap int) bool {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return false
	}
	return data[cap/32].Effective&(1<<(uint(cap)%32)) != 0
}
