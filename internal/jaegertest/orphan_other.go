//go:build !linux

package jaegertest

import "os/exec"

// dieWithParent has no portable equivalent off Linux; there a test binary killed
// without its cleanups leaves Jaeger running.
func dieWithParent(*exec.Cmd) {}
