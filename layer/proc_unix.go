//go:build unix

package layer

import (
	"os/exec"
	"syscall"
)

// processGroup makes cmd the leader of a group of its own, so that cancelling kills npm and the
// scripts it started alike.
func processGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
}
