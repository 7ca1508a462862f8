//go:build !linux

package kubetest

import "os/exec"

// dieWithParent has no portable equivalent off Linux; there a test binary killed
// without its cleanups leaves the server running.
func dieWithParent(*exec.Cmd) {}
