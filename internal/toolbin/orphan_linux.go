package toolbin

import (
	"os/exec"
	"syscall"
)

// dieWithParent has the kernel kill the child if the test binary dies without
// running its cleanups (a -timeout panic, a kill), so that no server is left
// holding its ports or retrying a backend that died with the test.
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
