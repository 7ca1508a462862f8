// Command switchboard is Switchboard's one binary: registry backends, the registrar,
// the agent, the control plane and their CLIs. Run `switchboard --help`.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := newRootCmd(os.Stdout, os.Stderr).ExecuteContext(ctx)
	stop()
	if err != nil {
		msg, code := report(err)
		fmt.Fprintln(os.Stderr, "switchboard:", msg)
		os.Exit(code)
	}
}
