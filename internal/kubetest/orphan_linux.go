package kubetest

import (
	"os/exec"
	"syscall"
)

// dieWithParent has the kernel kill the server if the test binary dies without
// running its cleanups (a -timeout panic, a kill): its etcd is in-process and gone
// then, and an orphaned server would retry it forever.
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
