// Package sandbox runs a command inside a base image's own file system, for the base's platform,
// without a daemon and never as the runner's root: toa-push re-executes itself as the init of new
// user, mount, PID, UTS and IPC namespaces (the sandbox's root is the caller's own id, or, when
// toa-push runs as root, an unprivileged id: SandboxIDs), lays a writable overlay over the base's
// root unpacked in the cache, binds in /proc (its kernel knobs read-only or masked, as runc does),
// a few devices, the runner's DNS and CA settings and the folders the command needs, pivots into
// it, and runs the command with the environment it is given, without any descriptor, capability
// or privilege it does not need, within bounds on its processes and what it writes; what it leaves
// running is killed and named. A foreign CPU runs under the QEMU user-mode emulator the runner
// has registered with binfmt_misc (flag F). What the command changes lands in the overlay's upper
// folder, which Changes lists as an OCI layer's entries. Where the kernel refuses overlayfs in a
// user namespace (before 5.11, or turned off there), the command runs on a private copy of the
// root instead, and Changes finds the same changes by comparing the copy with the root; where no
// namespace can be made at all (a container's root under the default seccomp profile), a root
// runner runs it chrooted in such a copy as the unprivileged id.
//
// A program that uses the package calls Init first thing in main (and in TestMain): in the
// re-executed processes it does the sandbox's work and never returns.
package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"
)

// initEnv marks the re-executed init; its value is the JSON of the spec.
const initEnv = "TOA_SANDBOX_INIT"

// initName is the re-executed init's argv[0], its other mark.
const initName = "toa-sandbox-init"

// BinfmtEnv names a binfmt_misc folder to look in instead of /proc/sys/fs/binfmt_misc (tests
// point it at an empty folder).
const BinfmtEnv = "TOA_BINFMT_MISC"

// The bounds of a command, unless it says others.
const (
	// DefaultMaxProcesses bounds the tasks of a sandbox (RLIMIT_NPROC counts threads too: a
	// node process holds about ten, so this leaves room for a hundred node processes at once,
	// and stops a fork bomb within a second).
	DefaultMaxProcesses = 2048
	// DefaultMaxFileSize bounds one file a command writes (RLIMIT_FSIZE).
	DefaultMaxFileSize = 2 << 30
	// DefaultMaxWrite bounds what a command adds to its upper folder and its writable binds.
	DefaultMaxWrite = 4 << 30
)

// Bind is a folder or file of the runner bound into the sandbox.
type Bind struct {
	Source   string // on the runner
	Target   string // inside the root, absolute
	ReadOnly bool
}

// Network is what network a command has.
type Network string

const (
	// NetworkRunner is the runner's network (a script may download prebuilt binaries).
	NetworkRunner Network = ""
	// NetworkNone is loopback alone, in a network namespace of the command's own (as BuildKit's
	// RUN --network=none).
	NetworkNone Network = "none"
)

// Command is one run inside a base.
type Command struct {
	Root     string   // the base's root, as Unpack returned it; never written
	Upper    string   // an empty folder that receives what the run changes
	Platform string   // the base's platform: "linux/arm64"
	Args     []string // the program and its arguments; a name without / is looked up in PATH of Env
	Env      []string // the whole environment of the command
	Dir      string   // the working folder inside the root; default /
	Binds    []Bind
	Stdout   io.Writer
	Stderr   io.Writer
	Timeout  time.Duration // default 30 minutes
	// Notice, when set, is told which way the command runs when it is not the usual overlay:
	// on a private copy of the root, as the kernel refused overlayfs, or chrooted in one, as no
	// namespace could be made.
	Notice func(string)
	// Network is the command's network: the runner's by default.
	Network Network
	// MaxProcesses bounds the sandbox's processes and threads at once (default
	// DefaultMaxProcesses): a run that reaches it is stopped with a *BoundError.
	MaxProcesses int
	// MaxFileSize bounds one file the command writes (default DefaultMaxFileSize): the write past
	// it fails (SIGXFSZ), and a command that fails so is a *BoundError.
	MaxFileSize int64
	// MaxWrite bounds what the command adds to Upper and to the writable binds (default
	// DefaultMaxWrite): a run past it is stopped with a *BoundError.
	MaxWrite int64
	// Leftovers, when set, is told the processes the command left running when it ended
	// ("pid 12: sleep 1000"), which the sandbox killed.
	Leftovers func([]string)
}

// withDefaults is c with its zero bounds and timeout set.
func (c Command) withDefaults() Command {
	if c.Timeout == 0 {
		c.Timeout = 30 * time.Minute
	}
	if c.MaxProcesses <= 0 {
		c.MaxProcesses = DefaultMaxProcesses
	}
	if c.MaxFileSize <= 0 {
		c.MaxFileSize = DefaultMaxFileSize
	}
	if c.MaxWrite <= 0 {
		c.MaxWrite = DefaultMaxWrite
	}
	return c
}

// ExitError is a command that ran and failed.
type ExitError struct {
	Code   int
	Output string // the tail of its output, when the caller collected none
}

func (e *ExitError) Error() string { return fmt.Sprintf("exit status %d", e.Code) }

// RunnerError is what this runner lacks to run in the base: the platform, what is missing and
// the one thing to do. It is the runner's, not the user's input (exit 1).
type RunnerError struct {
	Platform string
	Message  string
	Hint     string
}

func (e *RunnerError) Error() string {
	return fmt.Sprintf("cannot build for %s inside its base on this runner: %s\n  %s", e.Platform, e.Message, e.Hint)
}

// The bounds a BoundError names.
const (
	BoundProcesses = "processes"
	BoundFileSize  = "file size"
	BoundWrite     = "written"
)

// BoundError is a run the sandbox stopped, or whose command failed, at one of its bounds: the
// command's doing, not the runner's. The caller names the package or the line.
type BoundError struct {
	Bound string // BoundProcesses, BoundFileSize or BoundWrite
	Limit int64
	Path  string // the file that reached BoundFileSize, inside the root
}

func (e *BoundError) Error() string {
	switch e.Bound {
	case BoundProcesses:
		return fmt.Sprintf("its processes and threads reached the sandbox's bound of %d at once (a fork bomb, or a build that needs more); the sandbox stopped it", e.Limit)
	case BoundFileSize:
		return fmt.Sprintf("it wrote %s up to the sandbox's bound of %s on one file, and failed there", e.Path, size(e.Limit))
	default:
		return fmt.Sprintf("it wrote more than the sandbox's bound of %s into the layer and its bound folders; the sandbox stopped it", size(e.Limit))
	}
}

func size(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%d GiB", n>>30)
	case n >= 1<<20:
		return fmt.Sprintf("%d MiB", n>>20)
	default:
		return fmt.Sprintf("%d bytes", n)
	}
}

// Run runs c.Args inside c.Root for c.Platform and waits, within c.Timeout: over an overlay
// whose upper folder is c.Upper; where the kernel refuses overlayfs in a user namespace, on a
// private copy of the root made in c.Upper by the first run that needs it (and used by the runs
// of the same c.Upper after it); where no namespace can be made and toa-push runs as root,
// chrooted in such a copy as the sandbox's unprivileged id. An unprivileged runner without user
// namespaces gets a *RunnerError before anything runs.
func Run(ctx context.Context, c Command) error {
	if err := Check(c.Platform); err != nil {
		return err
	}
	if c.Network != NetworkRunner && c.Network != NetworkNone {
		return fmt.Errorf("the sandbox's network %q: want the runner's (\"\") or %q", c.Network, NetworkNone)
	}
	if err := mountPointsAreFolders(c.Root); err != nil {
		return err
	}
	ids := SandboxIDs()
	c = c.withDefaults()
	copied, err := readCopy(c.Upper)
	if err != nil {
		return err
	}
	switch {
	case copied != nil && copied.Chroot:
		return runChroot(ctx, c, ids, copied)
	case copied != nil:
		return runNamespaces(ctx, c, ids, modeCopy)
	}
	if os.Getenv(NoNamespacesEnv) == "1" {
		return runWithoutNamespaces(ctx, c, ids, noNamespacesHook)
	}
	err = runNamespaces(ctx, c, ids, modeOverlay)
	var refused *overlayRefused
	var none *namespacesRefused
	switch {
	case errors.As(err, &none):
		return runWithoutNamespaces(ctx, c, ids, none)
	case !errors.As(err, &refused):
		return err
	}
	start := time.Now()
	size, err := makeCopy(ctx, c.Root, c.Upper, ids, false)
	if err != nil {
		return &RunnerError{Platform: c.Platform, Message: fmt.Sprintf("%s, and the private copy of the base to run on instead failed: %v", refused.why, err),
			Hint: "give the cache (TOA_CACHE) room for a copy of the base, or run toa-push on a kernel that mounts overlayfs in a user namespace (5.11 or later)"}
	}
	if c.Notice != nil {
		c.Notice(fmt.Sprintf("%s: %s runs on a private copy of the base for %s instead of an overlay (%d MiB copied in %s); the layer is the same, the run slower",
			refused.why, strings.Join(c.Args, " "), c.Platform, size>>20, time.Since(start).Round(time.Millisecond)))
	}
	return runNamespaces(ctx, c, ids, modeCopy)
}

// mountPointsAreFolders says whether root's /dev and /proc are folders, where the sandbox mounts (or, the
// chroot way, makes) its own: a base whose are links would have them followed.
func mountPointsAreFolders(root string) error {
	for _, name := range []string{"dev", "proc"} {
		info, err := os.Lstat(filepath.Join(root, name))
		if err == nil && !info.IsDir() {
			kind := "file"
			if info.Mode()&os.ModeSymlink != 0 {
				kind = "link"
			}
			return fmt.Errorf("the base's /%s is a %s, not a folder: the sandbox mounts its own there", name, kind)
		}
	}
	return nil
}

// runWithoutNamespaces runs c where no namespace can be made: chrooted in a private copy of the
// root as the sandbox's unprivileged id, when toa-push runs as root with what that needs; else
// the runner's error, with the three ways out.
func runWithoutNamespaces(ctx context.Context, c Command, ids IDs, none *namespacesRefused) error {
	if err := canChroot(c.Platform, ids, none.why); err != nil {
		return err
	}
	if c.Network == NetworkNone {
		return &RunnerError{Platform: c.Platform, Message: none.why + ", and a network of loopback alone needs a network namespace",
			Hint: "run with the runner's network, or allow user namespaces on the runner"}
	}
	start := time.Now()
	size, err := makeCopy(ctx, c.Root, c.Upper, ids, true)
	if err != nil {
		return &RunnerError{Platform: c.Platform, Message: fmt.Sprintf("%s, and the private copy of the base to run chrooted in failed: %v", none.why, err),
			Hint: "give the cache (TOA_CACHE) room for a copy of the base"}
	}
	copied, err := readCopy(c.Upper)
	if err != nil {
		return err
	}
	if c.Notice != nil {
		c.Notice(fmt.Sprintf("%s: %s runs chrooted in a private copy of the base for %s as the unprivileged user %d, without namespaces (%d MiB copied in %s): "+
			"no /proc, the layer is the same", none.why, strings.Join(c.Args, " "), c.Platform, ids.UID, size>>20, time.Since(start).Round(time.Millisecond)))
	}
	return runChroot(ctx, c, ids, copied)
}

// NoNamespacesEnv set to 1 makes the sandbox take user namespaces as refused, as a container's
// default seccomp profile does: a test hook, so that the chroot way runs beside the others.
const NoNamespacesEnv = "TOA_SANDBOX_NO_NAMESPACES"

var noNamespacesHook = &namespacesRefused{why: "user namespaces are taken as refused (" + NoNamespacesEnv + "=1)"}

// The ways a sandbox runs.
const (
	modeOverlay = "overlay" // namespaces, an overlay over the root
	modeCopy    = "copy"    // namespaces, a private copy of the root
	modeChroot  = "chroot"  // no namespaces: chrooted in a private copy, as the sandbox's id
	modeProbe   = "probe"   // namespaces and a mount in them, nothing run
)

// overlayRefused is an init that could not mount the overlay because the kernel does not let a
// user namespace mount overlayfs: the command has not run.
type overlayRefused struct{ why string }

func (e *overlayRefused) Error() string { return e.why }

// namespacesRefused is a runner where the sandbox's namespaces cannot be made, or nothing can
// be mounted in them (a seccomp profile that refuses clone's namespace flags or mount, Ubuntu's
// AppArmor restriction that leaves a new user namespace without capabilities): nothing ran.
type namespacesRefused struct{ why string }

func (e *namespacesRefused) Error() string { return e.why }

// qemuNames are the binfmt_misc entries of QEMU's user-mode emulators, by GOARCH.
var qemuNames = map[string]string{"arm64": "aarch64", "arm": "arm", "amd64": "x86_64", "386": "i386",
	"ppc64le": "ppc64le", "s390x": "s390x", "riscv64": "riscv64"}

// Check says whether this runner can run programs of platform: its own CPU, or one whose QEMU
// emulator is registered with binfmt_misc with the F flag, which opens the emulator at
// registration so that it runs inside any root.
func Check(platform string) error {
	os_, arch, _ := strings.Cut(platform, "/")
	arch, _, _ = strings.Cut(arch, "/")
	if os_ != "linux" || runtime.GOOS != "linux" {
		return &RunnerError{Platform: platform, Message: "only linux runners build inside linux bases",
			Hint: "run toa-push on a linux runner"}
	}
	if arch == runtime.GOARCH || (runtime.GOARCH == "amd64" && arch == "386") {
		return nil
	}
	qemu, ok := qemuNames[arch]
	if !ok {
		return &RunnerError{Platform: platform, Message: "toa-push knows no QEMU emulator for " + arch,
			Hint: "build this platform on a runner of its CPU, or drop it from registry.platforms"}
	}
	register := fmt.Sprintf("register QEMU's emulator for %s with binfmt_misc, with the F flag: "+
		"sudo apt-get install -y qemu-user-static binfmt-support (Debian, Ubuntu), "+
		"or docker run --privileged --rm tonistiigi/binfmt --install %s (GitHub Actions: docker/setup-qemu-action)", arch, arch)
	dir := os.Getenv(BinfmtEnv)
	if dir == "" {
		dir = "/proc/sys/fs/binfmt_misc"
		if !binfmtMounted(dir) {
			// a container's /proc: the host's entries hold, unread (emulator.go)
			return probeEmulator(platform, arch, register)
		}
	}
	entry := filepath.Join(dir, "qemu-"+qemu)
	data, err := os.ReadFile(entry)
	if err != nil {
		return &RunnerError{Platform: platform, Message: fmt.Sprintf("no emulator for %s is registered with binfmt_misc (%s)", arch, entry), Hint: register}
	}
	text := string(data)
	if !strings.HasPrefix(text, "enabled") {
		return &RunnerError{Platform: platform, Message: fmt.Sprintf("the emulator for %s in binfmt_misc is disabled (%s)", arch, entry), Hint: register}
	}
	for _, line := range strings.Split(text, "\n") {
		if flags, ok := strings.CutPrefix(line, "flags: "); ok && !strings.Contains(flags, "F") {
			return &RunnerError{Platform: platform,
				Message: fmt.Sprintf("the emulator for %s is registered without the F flag (%s), so it cannot run inside the base", arch, entry),
				Hint:    register}
		}
	}
	return nil
}
