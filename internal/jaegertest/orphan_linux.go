package jaegertest

import (
	"os/exec"
	"syscall"
)

// dieWithParent has the kernel kill Jaeger if the test binary dies without running
// its cleanups (a -timeout panic, a kill), so that no collector is left holding
// its ports.
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
