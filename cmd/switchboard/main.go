// Command switchboard is Switchboard's one binary: registry backends, the registrar,
// the agent, the control plane and their CLIs. Run `switchboard --help`.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/registry"
)

// Exit codes: 0 ok, 1 runtime failure, 2 bad usage or invalid input.
const (
	exitFailure = 1
	exitUsage   = 2
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := newRootCmd(os.Stdout, os.Stderr).ExecuteContext(ctx)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "switchboard:", err)
		os.Exit(exitCode(err))
	}
}

// usageError marks an error caused by how the command was called.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usagef(format string, args ...any) error { return usageError{fmt.Errorf(format, args...)} }

func exitCode(err error) int {
	var u usageError
	if errors.As(err, &u) || errors.Is(err, endpoint.ErrInvalid) || errors.Is(err, registry.ErrBadParam) {
		return exitUsage
	}
	// Cobra reports argument and required-flag mistakes as plain errors.
	for _, prefix := range []string{"required flag", "unknown command", "accepts ", "unknown flag", "invalid argument"} {
		if strings.HasPrefix(err.Error(), prefix) {
			return exitUsage
		}
	}
	return exitFailure
}
