package main

import (
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/spf13/cobra"

	"github.com/switchboard-mesh/switchboard/internal/buildinfo"
)

// app holds what every subcommand shares: the logger and the output streams.
type app struct {
	logLevel  string
	logFormat string
	out       io.Writer
	errOut    io.Writer
}

// subcommands is filled by init functions in this package's files, one per command,
// so adding a command never edits another command's file.
var subcommands []func(*app) *cobra.Command

// newRootCmd builds the command tree writing to out and errOut (stdout and stderr in
// main, buffers in tests).
func newRootCmd(out, errOut io.Writer) *cobra.Command {
	a := &app{out: out, errOut: errOut}
	root := &cobra.Command{
		Use:   "switchboard",
		Short: "Service registration, discovery and routing control for multi-cluster fleets",
		Long: `Switchboard registers service endpoints, lets every node discover them, and
converges links and routes between data-plane nodes.

Start everything on this machine with no external services:
  switchboard dev

Then, in another terminal:
  switchboard registry register --cluster prod --service web --protocol http --address 10.0.0.2 --port 8080
  switchboard registry lookup --service web`,
		Version:       buildinfo.String(),
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			return a.validateLogFlags()
		},
	}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	root.PersistentFlags().StringVar(&a.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	root.PersistentFlags().StringVar(&a.logFormat, "log-format", "text", "log format: text or json")
	root.AddCommand(newVersionCmd(a))
	for _, sub := range subcommands {
		root.AddCommand(sub(a))
	}
	root.SetOut(out)
	root.SetErr(errOut)
	return root
}

func (a *app) validateLogFlags() error {
	if _, err := parseLevel(a.logLevel); err != nil {
		return usageError{err}
	}
	if a.logFormat != "text" && a.logFormat != "json" {
		return usagef("--log-format %q: want text or json", a.logFormat)
	}
	return nil
}

// logger returns the structured logger every component is handed; logs go to stderr
// so command output on stdout stays machine-readable.
func (a *app) logger() *slog.Logger { return a.loggerAtLeast(slog.LevelDebug) }

// loggerAtLeast is logger for a chatty component: it logs at floor or above even when
// --log-level asks for less, unless --log-level is debug.
func (a *app) loggerAtLeast(floor slog.Level) *slog.Logger {
	level, _ := parseLevel(a.logLevel)
	if level > slog.LevelDebug {
		level = max(level, floor)
	}
	opts := &slog.HandlerOptions{Level: level}
	if a.logFormat == "json" {
		return slog.New(slog.NewJSONHandler(a.errOut, opts))
	}
	return slog.New(slog.NewTextHandler(a.errOut, opts))
}

func parseLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(strings.ToUpper(s))); err != nil {
		return 0, fmt.Errorf("--log-level %q: want debug, info, warn or error", s)
	}
	return l, nil
}

func newVersionCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version of this binary",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			_, err := fmt.Fprintln(a.out, "switchboard", buildinfo.String())
			return err
		},
	}
}
