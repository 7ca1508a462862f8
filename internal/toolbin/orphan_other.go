//go:build !linux

package toolbin

import "os/exec"

// dieWithParent has no portable equivalent off Linux; there a test binary killed
// without its cleanups leaves the child running.
func dieWithParent(*exec.Cmd) {}
