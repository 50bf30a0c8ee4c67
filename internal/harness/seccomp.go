package harness

import (
	"os/exec"

	"github.com/toa-deploy/toa-deploy/internal/containerseccomp"
)

// UnderContainerSeccomp makes cmd (toa-push, not started) run as a CI job in a container under
// Docker's or containerd's default seccomp profile runs it without CAP_SYS_ADMIN: no namespace
// can be made, nothing mounted (internal/containerseccomp). The test binary's TestMain must call
// containerseccomp.Exec first: the filter goes in through it. cmd's environment, folder and
// credentials (SysProcAttr, to run it as another user) stay.
func UnderContainerSeccomp(cmd *exec.Cmd) *exec.Cmd {
	return containerseccomp.Wrap(cmd, containerseccomp.DenyNamespaces)
}

// UnderMountlessUserNamespaces is UnderContainerSeccomp for a runner whose user namespaces have no
// capabilities (Ubuntu 24.04's kernel.apparmor_restrict_unprivileged_userns=1): made, and nothing
// can be mounted in them.
func UnderMountlessUserNamespaces(cmd *exec.Cmd) *exec.Cmd {
	return containerseccomp.Wrap(cmd, containerseccomp.DenyMount)
}
