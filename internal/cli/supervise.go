package cli

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"time"
)

// workerVariable marks the process that does the work, under the supervisor Supervise starts.
const workerVariable = "TOA_DEPLOY_WORKER"

// terminalVariable tells the worker that the supervisor's stderr is a terminal: the worker's own
// is the pipe the supervisor reads.
const terminalVariable = "TOA_DEPLOY_STDERR_TERMINAL"

// crashLine begins what Go's runtime writes when it ends a process: a fatal error (out of memory,
// too many threads, a concurrent map write), a panic, a signal it cannot handle.
var crashLine = regexp.MustCompile(`(?m)^(fatal error: |panic: |runtime: |runtime/cgo: |SIG[A-Z]+: |unexpected fault address )`)

// Supervise runs the command as a worker process under this one, and returns the code to exit
// with; it returns false in the worker itself, which then does the work. Go cannot recover from
// its own fatal errors (runtime: out of memory under a ulimit or a cgroup, too many threads):
// the runtime writes a trace to stderr and exits 2, the code for bad input. The supervisor passes
// stdin and stdout through, copies the worker's stderr to its own until the runtime's crash
// begins, writes the crash to a file instead of the user's terminal, and exits 1: a resource
// limit is the work failing, never bad input. Signals are forwarded (the worker is in a process
// group of its own, so a Ctrl-C reaches it once), and the worker dies with its supervisor.
func Supervise(command string) (int, bool) {
	if os.Getenv(workerVariable) == "1" {
		return 0, false
	}
	self, err := os.Executable()
	if err != nil {
		return 0, false // cannot re-execute: do the work here
	}
	worker := exec.Command(self, os.Args[1:]...)
	worker.Env = append(os.Environ(), workerVariable+"=1")
	if IsTerminal(os.Stderr) {
		worker.Env = append(worker.Env, terminalVariable+"=1")
	}
	worker.Stdin, worker.Stdout = os.Stdin, os.Stdout
	// a pipe of our own rather than StderrPipe: a process the worker started (a credential
	// helper) may keep its end open after the worker is gone, and Wait must not wait for it
	stderr, stderrW, err := os.Pipe()
	if err != nil {
		return 0, false
	}
	defer stderr.Close()
	worker.Stderr = stderrW
	worker.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	signals := make(chan os.Signal, 4)
	signal.Notify(signals, os.Interrupt, syscall.SIGTERM)
	err = worker.Start()
	stderrW.Close()
	if err != nil {
		signal.Stop(signals)
		return 0, false
	}
	go func() {
		for s := range signals {
			worker.Process.Signal(s)
		}
	}()
	copied := make(chan crash, 1)
	go func() { copied <- copyUntilCrash(os.Stderr, stderr, command) }()
	err = worker.Wait()
	signal.Stop(signals)
	var crash crash
	select {
	case crash = <-copied:
	case <-time.After(200 * time.Millisecond): // what the worker wrote is read by now
		stderr.Close()
		crash = <-copied
	}
	var exit *exec.ExitError
	switch {
	case strings.HasPrefix(crash.first, "panic: "):
		fmt.Fprintf(os.Stderr, "error: %s crashed: %s (a bug: please report it with the trace)%s\n", command, crash.first, crash.where())
		return ExitFailed, true
	case crash.first != "":
		fmt.Fprintf(os.Stderr, "error: %s stopped: %s (a limit of the machine: memory, threads or files)%s\n", command, crash.first, crash.where())
		return ExitFailed, true
	case errors.As(err, &exit):
		if status, ok := exit.Sys().(syscall.WaitStatus); ok && status.Signaled() {
			fmt.Fprintf(os.Stderr, "error: %s was killed by %s (the kernel's out-of-memory killer sends SIGKILL)\n", command, status.Signal())
			return ExitFailed, true
		}
		return exit.ExitCode(), true
	case err != nil:
		fmt.Fprintf(os.Stderr, "error: %s: %v\n", command, err)
		return ExitFailed, true
	}
	return ExitOK, true
}

// crash is what copyUntilCrash found of a crash: its first line, and the file its trace went to.
type crash struct {
	first string
	file  string
}

func (c crash) where() string {
	if c.file == "" {
		return ""
	}
	return "; the runtime's trace is in " + c.file
}

// copyUntilCrash copies the worker's stderr to w as it comes (the live progress display has no
// newlines), until a line begins the runtime's crash; that line and the rest go to a file.
func copyUntilCrash(w io.Writer, r io.Reader, command string) crash {
	var c crash
	var out io.Writer = w
	buf := make([]byte, 32<<10)
	for {
		n, err := r.Read(buf)
		chunk := buf[:n]
		if c.first == "" && n > 0 {
			if at := crashLine.FindIndex(chunk); at != nil {
				out.Write(chunk[:at[0]])
				chunk = chunk[at[0]:]
				line, _, _ := bytes.Cut(chunk, []byte("\n"))
				c.first = string(bytes.TrimSpace(line))
				out = io.Discard
				if f, err := os.CreateTemp("", command+"-crash-*.txt"); err == nil {
					defer f.Close()
					c.file, _ = filepath.Abs(f.Name())
					out = f
				}
			}
		}
		out.Write(chunk)
		if err != nil {
			return c
		}
	}
}
