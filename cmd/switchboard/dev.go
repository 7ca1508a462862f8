package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/switchboard-mesh/switchboard/internal/embednats"
	"github.com/switchboard-mesh/switchboard/registrar"
	"github.com/switchboard-mesh/switchboard/registry"
)

func init() { subcommands = append(subcommands, newDevCmd) }

type devOptions struct {
	natsListen      string
	registrarListen string
	registrarHealth string
	dataDir         string
}

func newDevCmd(a *app) *cobra.Command {
	var o devOptions
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run Switchboard on this machine with no external services",
		Long: `Start an embedded NATS server with JetStream (the registry's stream lives in
--data-dir) and a registrar in front of it, and keep running until interrupted
(Ctrl-C or SIGTERM), printing what it serves. Point the other commands at it: they
default to its addresses (--registry-backend jetstream, or registrar with
--registrar-address).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runDev(cmd, a, o) },
	}
	cmd.Flags().StringVar(&o.natsListen, "nats-listen", "127.0.0.1:4222", "address the embedded NATS server listens on")
	cmd.Flags().StringVar(&o.registrarListen, "registrar-listen", "127.0.0.1:9443", "gRPC address of the registrar (backed by the embedded JetStream)")
	cmd.Flags().StringVar(&o.registrarHealth, "registrar-health-listen", "127.0.0.1:8081", "HTTP address of the registrar's /healthz, /readyz and /metrics")
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
	reg, err := startDevRegistrar(ctx, o, ns.ClientURL(), log.With("component", "registrar"))
	if err != nil {
		return err
	}
	fmt.Fprintf(a.out, "switchboard dev is running (Ctrl-C to stop)\n")
	fmt.Fprintf(a.out, "  NATS JetStream  %s  (data in %s)\n", ns.ClientURL(), storeDir)
	fmt.Fprintf(a.out, "  Registrar       %s  (health http://%s)\n", reg.srv.Addr(), reg.srv.HealthAddr())
	log.Info("dev environment ready", "nats", ns.ClientURL(), "registrar", reg.srv.Addr().String())
	<-ctx.Done()
	fmt.Fprintln(a.out, "switchboard dev: shutting down")
	// The registrar persists its queued writes before the stream goes away.
	return reg.stop()
}

// devRegistrar is the registrar dev runs over the embedded JetStream.
type devRegistrar struct {
	srv     *registrar.Server
	backend registry.Registry
	done    chan error
}

func startDevRegistrar(ctx context.Context, o devOptions, natsURL string, log *slog.Logger) (*devRegistrar, error) {
	backend, err := registry.Open(ctx, "jetstream", map[string]string{"nats-url": natsURL}, log)
	if err != nil {
		return nil, err
	}
	srv, err := registrar.NewServer(registrar.ServerConfig{
		// One machine stands in for every cluster: accept writes for any of them.
		Registrar:    registrar.Config{Cluster: "dev", AlsoAccept: []string{"*"}, Backend: backend, Logger: log},
		Listen:       o.registrarListen,
		HealthListen: o.registrarHealth,
	})
	if err != nil {
		backend.Close()
		return nil, err
	}
	r := &devRegistrar{srv: srv, backend: backend, done: make(chan error, 1)}
	go func() { r.done <- srv.Run(ctx) }()
	return r, nil
}

func (r *devRegistrar) stop() error {
	err := <-r.done
	r.backend.Close()
	return err
}
