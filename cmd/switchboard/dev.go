package main

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/switchboard-mesh/switchboard/internal/embednats"
)

func init() { subcommands = append(subcommands, newDevCmd) }

type devOptions struct {
	natsListen string
	dataDir    string
}

func newDevCmd(a *app) *cobra.Command {
	var o devOptions
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run Switchboard on this machine with no external services",
		Long: `Start an embedded NATS server with JetStream (the registry's stream lives in
--data-dir) and keep running until interrupted (Ctrl-C or SIGTERM), printing what it
serves. Point the other commands at it: they default to its address.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runDev(cmd, a, o) },
	}
	cmd.Flags().StringVar(&o.natsListen, "nats-listen", "127.0.0.1:4222", "address the embedded NATS server listens on")
	cmd.Flags().StringVar(&o.dataDir, "data-dir", defaultDataDir(), "directory for the embedded servers' data")
	return cmd
}

func defaultDataDir() string {
	dir, err := os.UserCacheDir()
	if err != nil {
		dir = os.TempDir()
	}
	return filepath.Join(dir, "switchboard", "dev")
}

func runDev(cmd *cobra.Command, a *app, o devOptions) error {
	ctx := cmd.Context()
	log := a.logger()
	host, portStr, err := net.SplitHostPort(o.natsListen)
	if err != nil {
		return usagef("--nats-listen %q: want host:port", o.natsListen)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		return usagef("--nats-listen %q: port is not a number", o.natsListen)
	}
	storeDir := filepath.Join(o.dataDir, "nats")
	if err := os.MkdirAll(storeDir, 0o750); err != nil {
		return fmt.Errorf("--data-dir: %w", err)
	}
	ns, err := embednats.Start(ctx, embednats.Options{Host: host, Port: port, StoreDir: storeDir, Logger: log.With("component", "nats")})
	if err != nil {
		return err
	}
	defer ns.Shutdown()
	fmt.Fprintf(a.out, "switchboard dev is running (Ctrl-C to stop)\n")
	fmt.Fprintf(a.out, "  NATS JetStream  %s  (data in %s)\n", ns.ClientURL(), storeDir)
	log.Info("dev environment ready", "nats", ns.ClientURL())
	<-ctx.Done()
	fmt.Fprintln(a.out, "switchboard dev: shutting down")
	return nil
}
