package sandbox

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// probeTimeout bounds CheckUserNamespaces's init.
const probeTimeout = 30 * time.Second

// report is what the init says on its status pipe when it ends: never written by the command,
// which does not hold the pipe.
type report struct {
	Done  bool   `json:"done"`            // the init reached its end
	Setup string `json:"setup,omitempty"` // it could not set the sandbox up: why
	// Refused names what the runner refused the setup: "namespaces" (nothing can be mounted in
	// them), "overlay", or "gone" (a folder removed under the run).
	Refused   string   `json:"refused,omitempty"`
	Code      int      `json:"code"`
	Leftovers []string `json:"leftovers,omitempty"`
	Processes bool     `json:"processes,omitempty"` // the run reached its bound of processes
}

// readReport reads the init's report; a missing or cut one is not Done.
func readReport(r io.Reader) report {
	var rep report
	data, _ := io.ReadAll(io.LimitReader(r, 1<<20))
	if len(data) > 0 {
		_ = json.Unmarshal(data, &rep)
	}
	return rep
}

// supervise starts the init of spec s in attr's namespaces (none for the chroot way) and waits
// for it within c.Timeout, stopping it past c.MaxWrite of what it adds to dirs. The init's report becomes Run's error.
func supervise(ctx context.Context, c Command, s spec, attr *syscall.SysProcAttr, dirs []watched) error {
	statusR, statusW, err := os.Pipe()
	if err != nil {
		return err
	}
	defer statusR.Close()
	s.StatusFd = 3
	data, err := json.Marshal(s)
	if err != nil {
		statusW.Close()
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()
	// started as /proc/self/exe, not by its path: the sandbox's id may not pass the folders above
	// the program (a test binary's are 0700)
	cmd := exec.CommandContext(ctx, "/proc/self/exe")
	cmd.Args, cmd.Dir, cmd.SysProcAttr = []string{initName}, "/", attr
	cmd.Env = []string{initEnv + "=" + string(data)}
	cmd.ExtraFiles = []*os.File{statusW}
	var tail bytes.Buffer
	cmd.Stdout, cmd.Stderr = orTail(c.Stdout, &tail), orTail(c.Stderr, &tail)
	// asked to stop, the init kills all it started and reports; SIGKILL after WaitDelay
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 5 * time.Second
	w := newWriteWatch(dirs, c.MaxWrite)
	if err := cmd.Start(); err != nil {
		statusW.Close()
		return startError(c, attr, err)
	}
	statusW.Close()
	reports := make(chan report, 1)
	go func() { reports <- readReport(statusR) }()
	watchCtx, stopWatch := context.WithCancel(ctx)
	watching := make(chan struct{})
	go func() {
		defer close(watching)
		w.watch(watchCtx, func() { _ = cmd.Process.Signal(syscall.SIGTERM) })
	}()
	waitErr := cmd.Wait()
	stopWatch()
	<-watching
	r := <-reports
	if c.Leftovers != nil && len(r.Leftovers) > 0 {
		c.Leftovers(r.Leftovers)
	}
	what := fmt.Sprintf("run %s in the base for %s", strings.Join(c.Args, " "), c.Platform)
	switch {
	case w.exceeded():
		return &BoundError{Bound: BoundWrite, Limit: c.MaxWrite}
	case r.Processes:
		return &BoundError{Bound: BoundProcesses, Limit: int64(c.MaxProcesses)}
	case ctx.Err() != nil:
		return fmt.Errorf("%s: %w", what, ctx.Err())
	case r.Setup != "":
		return setupReport(c, s, r)
	case !r.Done:
		return fmt.Errorf("%s: the sandbox's init ended without its report (%v)\n%s", what, waitErr, tail.String())
	case r.Code != 0:
		if p := w.fileAt(c.MaxFileSize); p != "" {
			return &BoundError{Bound: BoundFileSize, Limit: c.MaxFileSize, Path: p}
		}
		return &ExitError{Code: r.Code, Output: tail.String()}
	}
	return nil
}

// setupReport is the error of an init that could not set the sandbox up.
func setupReport(c Command, s spec, r report) error {
	switch {
	case r.Refused == refusedNamespaces:
		return &namespacesRefused{why: "it lets toa-push make user namespaces but not mount in them (" + r.Setup + ")" + restriction()}
	case r.Refused == refusedOverlay && s.Mode == modeOverlay:
		return &overlayRefused{why: r.Setup}
	case r.Refused == refusedGone:
		return setupError(c, gonePrefix+r.Setup)
	}
	return setupError(c, r.Setup)
}

// restriction names the setting that leaves a user namespace without capabilities, if set.
func restriction() string {
	switch {
	case sysctlIs("/proc/sys/kernel/apparmor_restrict_unprivileged_userns", "1") && os.Geteuid() != 0:
		return "; kernel.apparmor_restrict_unprivileged_userns is 1"
	case seccompFiltered():
		return "; a seccomp filter refuses mount"
	}
	return ""
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
