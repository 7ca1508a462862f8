// Command switchboard is Switchboard's one binary: registry backends, the registrar,
// the agent, the control plane and their CLIs. Run `switchboard --help`.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/switchboard-mesh/switchboard/cni"
)

func main() {
	// The container runtime runs a CNI plugin with no arguments and CNI_COMMAND set.
	if len(os.Args) == 1 && os.Getenv("CNI_COMMAND") != "" {
		cni.Main()
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := newRootCmd(os.Stdout, os.Stderr).ExecuteContext(ctx)
	stop()
	if err != nil {
		msg, code := report(err)
		fmt.Fprintln(os.Stderr, "switchboard:", msg)
		os.Exit(code)
	}
}
