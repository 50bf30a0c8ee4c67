// Package sandbox runs a command inside a base image's own file system, for the base's platform,
// without a daemon and without privileges: toa-push re-executes itself as the init of new user,
// mount and PID namespaces (the runner's user mapped to root inside), lays a writable overlay over
// the base's root unpacked in the cache, binds in /proc, a few devices, the runner's DNS and CA
// settings and the folders the command needs, pivots into it and runs the command with the
// environment it is given. A foreign CPU runs under the QEMU user-mode emulator the runner has
// registered with binfmt_misc (flag F). What the command changes lands in the overlay's upper
// folder, which Changes lists as an OCI layer's entries. Where the kernel refuses overlayfs in a
// user namespace (before 5.11, or turned off there), the command runs on a private copy of the
// root instead, and Changes finds the same changes by comparing the copy with the root.
//
// A program that uses the package calls Init first thing in main (and in TestMain): in the
// re-executed process it does the namespace's work and never returns.
package sandbox

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"
)

// initEnv marks the re-executed process; its value is the JSON of the spec.
const initEnv = "TOA_SANDBOX_INIT"

// initName is the re-executed process's argv[0], its other mark.
const initName = "toa-sandbox-init"

// BinfmtEnv names a binfmt_misc folder to look in instead of /proc/sys/fs/binfmt_misc (tests
// point it at an empty folder).
const BinfmtEnv = "TOA_BINFMT_MISC"

// Bind is a folder or file of the runner bound into the sandbox.
type Bind struct {
	Source   string // on the runner
	Target   string // inside the root, absolute
	ReadOnly bool
}

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
	// on a private copy of the root, as the kernel refused overlayfs.
	Notice func(string)
}

// spec is what the init reads.
type spec struct {
	Lower, Upper, Work, Merged string
	// Copy, when set, is a private copy of the root to run on instead of an overlay.
	Copy string
	// RefuseOverlay takes overlayfs as refused, without asking the kernel (NoOverlayEnv).
	RefuseOverlay bool
	// Probe makes the init exit at once: CheckUserNamespaces.
	Probe     bool
	Binds     []Bind
	Args, Env []string
	Dir       string
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

// Run runs c.Args inside c.Root for c.Platform and waits, within c.Timeout: over an overlay
// whose upper folder is c.Upper, or, where the kernel refuses overlayfs in a user namespace, on a
// private copy of the root made in c.Upper by the first run that needs it (and used by the runs
// of the same c.Upper after it).
func Run(ctx context.Context, c Command) error {
	if err := Check(c.Platform); err != nil {
		return err
	}
	copied, err := readCopy(c.Upper)
	if err != nil {
		return err
	}
	if copied != nil {
		return run(ctx, c, spec{Copy: filepath.Join(c.Upper, copyDir)})
	}
	err = runOverlay(ctx, c)
	var refused *overlayRefused
	if !errors.As(err, &refused) {
		return err
	}
	start := time.Now()
	size, err := makeCopy(ctx, c.Root, c.Upper)
	if err != nil {
		return &RunnerError{Platform: c.Platform, Message: fmt.Sprintf("%s, and the private copy of the base to run on instead failed: %v", refused.why, err),
			Hint: "give the cache (TOA_CACHE) room for a copy of the base, or run toa-push on a kernel that mounts overlayfs in a user namespace (5.11 or later)"}
	}
	if c.Notice != nil {
		c.Notice(fmt.Sprintf("%s: %s runs on a private copy of the base for %s instead of an overlay (%d MiB copied in %s); the layer is the same, the run slower",
			refused.why, strings.Join(c.Args, " "), c.Platform, size>>20, time.Since(start).Round(time.Millisecond)))
	}
	return run(ctx, c, spec{Copy: filepath.Join(c.Upper, copyDir)})
}

// overlayRefused is an init that could not mount the overlay because the kernel does not let a
// user namespace mount overlayfs: the command has not run.
type overlayRefused struct{ why string }

func (e *overlayRefused) Error() string { return e.why }

// runOverlay runs c over an overlay of c.Root whose upper folder is c.Upper.
func runOverlay(ctx context.Context, c Command) error {
	work, err := os.MkdirTemp(filepath.Dir(c.Upper), ".work-")
	if err != nil {
		return fmt.Errorf("make the overlay's work folder: %w", err)
	}
	defer removeAll(work)
	merged := filepath.Join(work, "merged")
	overlayWork := filepath.Join(work, "work")
	for _, d := range []string{merged, overlayWork} {
		if err := os.Mkdir(d, 0o755); err != nil {
			return err
		}
	}
	return run(ctx, c, spec{Lower: c.Root, Upper: c.Upper, Work: overlayWork, Merged: merged,
		RefuseOverlay: os.Getenv(NoOverlayEnv) == "1"})
}

// run starts the init with s, the root it runs in, completed by c's command, and waits.
func run(ctx context.Context, c Command, s spec) error {
	s.Binds, s.Args, s.Env, s.Dir = append(runnerBinds(), c.Binds...), c.Args, c.Env, c.Dir
	data, err := json.Marshal(s)
	if err != nil {
		return err
	}
	timeout := c.Timeout
	if timeout == 0 {
		timeout = 30 * time.Minute
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find toa-push's own program to run in the sandbox: %w", err)
	}
	cmd := exec.CommandContext(ctx, self)
	cmd.Args = []string{initName}
	cmd.Env = []string{initEnv + "=" + string(data)}
	var tail bytes.Buffer
	cmd.Stdout, cmd.Stderr = orTail(c.Stdout, &tail), orTail(c.Stderr, &tail)
	cmd.SysProcAttr = namespaces()
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		return userNamespaceError(c.Platform, err)
	}
	err = cmd.Wait()
	if ctx.Err() != nil {
		return fmt.Errorf("run %s in the base for %s: %w", strings.Join(c.Args, " "), c.Platform, ctx.Err())
	}
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		if why := setupFailure(exit.ExitCode(), tail.String(), c.Stderr); why != "" {
			if refused, ok := strings.CutPrefix(why, refusedPrefix); ok && s.Copy == "" {
				return &overlayRefused{why: refused}
			}
			return setupError(c, why)
		}
		return &ExitError{Code: exit.ExitCode(), Output: tail.String()}
	}
	return err
}

// setupError is the runner's error of an init that could not set the sandbox up, with the hint
// its cause calls for: a folder removed under the run is not the kernel's doing.
func setupError(c Command, why string) *RunnerError {
	if gone, ok := strings.CutPrefix(why, gonePrefix); ok {
		return &RunnerError{Platform: c.Platform, Message: gone,
			Hint: fmt.Sprintf("a folder the run needs was removed while it ran, by something other than toa-push (its own prune leaves what a run uses): remove %s, which toa-push unpacks again, and run it again", c.Root)}
	}
	return &RunnerError{Platform: c.Platform, Message: why,
		Hint: "run toa-push on a Linux runner whose kernel mounts overlayfs in a user namespace (5.11 or later), with the cache (TOA_CACHE) on a local file system"}
}

// setupFailure is what the init said when it could not set the sandbox up, or "". It writes to
// the command's stderr, so the words are looked for in what the caller collected too.
func setupFailure(code int, tail string, stderr io.Writer) string {
	if code != initFailed {
		return ""
	}
	out := tail
	if b, ok := stderr.(interface{ String() string }); ok {
		out += b.String()
	}
	for _, line := range strings.Split(out, "\n") {
		if why, ok := strings.CutPrefix(line, initPrefix); ok {
			return why
		}
	}
	return ""
}

// orTail is w, or the tail buffer when the caller gave none.
func orTail(w io.Writer, tail *bytes.Buffer) io.Writer {
	if w != nil {
		return w
	}
	return &limited{b: tail, max: 64 << 10}
}

type limited struct {
	b   *bytes.Buffer
	max int
}

func (l *limited) Write(p []byte) (int, error) {
	l.b.Write(p)
	if over := l.b.Len() - l.max; over > 0 {
		rest := append([]byte(nil), l.b.Bytes()[over:]...)
		l.b.Reset()
		l.b.Write(rest)
	}
	return len(p), nil
}

// runnerBinds are the runner's settings every command needs: DNS, the hosts file, the CA bundle.
func runnerBinds() []Bind {
	var binds []Bind
	for _, f := range []string{"/etc/resolv.conf", "/etc/hosts"} {
		if _, err := os.Stat(f); err == nil {
			binds = append(binds, Bind{Source: f, Target: f, ReadOnly: true})
		}
	}
	for _, ca := range []string{"/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt", "/etc/ssl/cert.pem"} {
		if _, err := os.Stat(ca); err == nil {
			binds = append(binds, Bind{Source: ca, Target: "/etc/ssl/certs/ca-certificates.crt", ReadOnly: true})
			break
		}
	}
	return binds
}

// CheckUserNamespaces says whether this runner lets toa-push make the namespaces a run in a base
// of platform needs: it starts the sandbox's init in them, which exits at once. The error is
// Run's when they are refused.
func CheckUserNamespaces(ctx context.Context, platform string) error {
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find toa-push's own program to run in the sandbox: %w", err)
	}
	data, err := json.Marshal(spec{Probe: true})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, self)
	cmd.Args = []string{initName}
	cmd.Env = []string{initEnv + "=" + string(data)}
	cmd.SysProcAttr = namespaces()
	if err := cmd.Start(); err != nil {
		return userNamespaceError(platform, err)
	}
	if err := cmd.Wait(); err != nil {
		return fmt.Errorf("try the sandbox's namespaces for %s: %w", platform, err)
	}
	return nil
}

// namespaces are the sandbox's: user (the runner's user as root), mount and PID.
func namespaces() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{
		Cloneflags:  syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS | syscall.CLONE_NEWPID,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getuid(), Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getgid(), Size: 1}},
		Pdeathsig:   syscall.SIGKILL,
	}
}

// userNamespaceError says why the sandbox could not start, with the setting to change.
func userNamespaceError(platform string, err error) error {
	if !errors.Is(err, syscall.EPERM) && !errors.Is(err, syscall.ENOSPC) && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.EACCES) {
		return fmt.Errorf("start the sandbox for %s: %w", platform, err)
	}
	why := "it does not allow unprivileged user namespaces"
	if n, readErr := os.ReadFile("/proc/sys/user/max_user_namespaces"); readErr == nil && strings.TrimSpace(string(n)) == "0" {
		why += " (user.max_user_namespaces is 0)"
	} else if n, readErr := os.ReadFile("/proc/sys/kernel/unprivileged_userns_clone"); readErr == nil && strings.TrimSpace(string(n)) == "0" {
		why += " (kernel.unprivileged_userns_clone is 0)"
	} else if n, readErr := os.ReadFile("/proc/sys/kernel/apparmor_restrict_unprivileged_userns"); readErr == nil && strings.TrimSpace(string(n)) == "1" {
		why += " (kernel.apparmor_restrict_unprivileged_userns is 1)"
	}
	return &RunnerError{Platform: platform,
		Message: fmt.Sprintf("%s: %v", why, err),
		Hint: "allow them on the runner: sudo sysctl -w user.max_user_namespaces=15000 kernel.unprivileged_userns_clone=1 " +
			"(and kernel.apparmor_restrict_unprivileged_userns=0 on Ubuntu 24.04)"}
}

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
	dir := os.Getenv(BinfmtEnv)
	if dir == "" {
		dir = "/proc/sys/fs/binfmt_misc"
	}
	entry := filepath.Join(dir, "qemu-"+qemu)
	data, err := os.ReadFile(entry)
	register := fmt.Sprintf("register QEMU's emulator for %s with binfmt_misc, with the F flag: "+
		"sudo apt-get install -y qemu-user-static binfmt-support (Debian, Ubuntu), "+
		"or docker run --privileged --rm tonistiigi/binfmt --install %s (GitHub Actions: docker/setup-qemu-action)", arch, arch)
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
