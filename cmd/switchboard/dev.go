package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/switchboard-mesh/switchboard/controlplane/config"
	"github.com/switchboard-mesh/switchboard/controlplane/server"
	"github.com/switchboard-mesh/switchboard/internal/embednats"
	"github.com/switchboard-mesh/switchboard/registrar"
	"github.com/switchboard-mesh/switchboard/registry"
)

func init() { subcommands = append(subcommands, newDevCmd) }

type devOptions struct {
	natsListen      string
	registrarListen string
	registrarHealth string
	cpNorthbound    string
	cpSouthbound    string
	cpMetrics       string
	dataDir         string
	reset           bool
	fabric          devFabricOptions
}

// listens pairs each address dev serves with the flag that moves it.
func (o devOptions) listens() []string {
	return []string{
		"nats-listen", o.natsListen,
		"registrar-listen", o.registrarListen,
		"registrar-health-listen", o.registrarHealth,
		"controlplane-northbound", o.cpNorthbound,
		"controlplane-southbound", o.cpSouthbound,
		"controlplane-metrics-listen", o.cpMetrics,
	}
}

func newDevCmd(a *app) *cobra.Command {
	var o devOptions
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run Switchboard on this machine with no external services",
		Long: `Start, on this machine and with no external services: an embedded NATS server
with JetStream (the registry's stream lives in --data-dir), a registrar in front of
it, and a control plane (API mode, in-memory store). Keep running until interrupted
(Ctrl-C or SIGTERM), printing what it serves. The other commands default to these
addresses: 'switchboard registry ...' uses the JetStream stream, '--registry-backend
registrar' the registrar, 'switchboard ctl' the control plane.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runDev(cmd, a, o) },
	}
	cmd.Flags().StringVar(&o.natsListen, "nats-listen", "127.0.0.1:4222", "address the embedded NATS server listens on")
	cmd.Flags().StringVar(&o.registrarListen, "registrar-listen", "127.0.0.1:9443", "gRPC address of the registrar (backed by the embedded JetStream)")
	cmd.Flags().StringVar(&o.registrarHealth, "registrar-health-listen", "127.0.0.1:8081", "HTTP address of the registrar's /healthz, /readyz and /metrics")
	cmd.Flags().StringVar(&o.cpNorthbound, "controlplane-northbound", "127.0.0.1:50051", "control plane management API address (switchboard ctl)")
	cmd.Flags().StringVar(&o.cpSouthbound, "controlplane-southbound", "127.0.0.1:50052", "control plane address data-plane nodes connect to")
	cmd.Flags().StringVar(&o.cpMetrics, "controlplane-metrics-listen", "127.0.0.1:50053", `HTTP address of the control plane's /healthz, /readyz and /metrics ("" disables)`)
	cmd.Flags().StringVar(&o.dataDir, "data-dir", defaultDataDir(), "directory for the embedded servers' data, kept across restarts")
	cmd.Flags().BoolVar(&o.reset, "reset", false, "empty --data-dir first: start with an empty registry")
	o.fabric.register(cmd)
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
	// ctx ends on interrupt. The registrar and the control plane run on contexts of
	// their own, so that shutdown stops the components in order: the nodes
	// deregister while the control plane still runs, and the registrar persists
	// its queued writes before NATS goes away. A component that fails to start
	// stops those started before it the same way.
	ctx := cmd.Context()
	regCtx, stopReg := context.WithCancel(context.WithoutCancel(ctx))
	defer stopReg()
	cpCtx, stopCP := context.WithCancel(context.WithoutCancel(ctx))
	defer stopCP()
	// Refused before anything starts: dev has no --insecure, so it stays on loopback.
	if err := checkListens(o.listens()...); err != nil {
		return err
	}
	if err := devControlPlaneConfig(o).CheckListeners(); err != nil {
		return usageError{err}
	}
	// A second dev (or anything else) on one of the ports is named at once, with the
	// flag that moves it; otherwise the embedded NATS server would wait for a
	// listener that never comes.
	if err := probeListens(o.listens()...); err != nil {
		return err
	}
	o.fabric.anyPortIfTaken = !cmd.Flags().Changed("nodes-base-port")
	if !o.fabric.anyPortIfTaken {
		if err := o.fabric.checkPorts(); err != nil {
			return err
		}
	}
	log := a.logger()
	host, portStr, _ := net.SplitHostPort(o.natsListen) // checked above
	port, _ := strconv.Atoi(portStr)
	storeDir := filepath.Join(o.dataDir, "nats")
	kept, err := prepareStoreDir(storeDir, o.reset)
	if err != nil {
		return err
	}
	ns, err := embednats.Start(ctx, embednats.Options{Host: host, Port: port, StoreDir: storeDir, Logger: a.loggerAtLeast(slog.LevelWarn).With("component", "nats")})
	if err != nil {
		return err
	}
	defer ns.Shutdown()
	reg, err := startDevRegistrar(regCtx, o, ns.ClientURL(), log.With("component", "registrar"))
	if err != nil {
		return err
	}
	stopRegistrar := func() error { stopReg(); return reg.stop() }
	cp, err := startDevControlPlane(cpCtx, o, log)
	if err != nil {
		return errors.Join(err, stopRegistrar())
	}
	stopControlPlane := func() error { stopCP(); return cp.stop() }
	fab, err := startDevFabric(ctx, a, o.fabric, ns.ClientURL(), cp.srv, log)
	if err != nil {
		return errors.Join(err, stopControlPlane(), stopRegistrar())
	}
	// One block, in one write, once everything is up: not lines among the logs
	// of a terminal that shows stdout and stderr together.
	var banner strings.Builder
	fmt.Fprintf(&banner, "switchboard dev is running (Ctrl-C to stop)\n")
	fmt.Fprintf(&banner, "  NATS JetStream  %s  (data in %s, %s)\n", ns.ClientURL(), storeDir, kept)
	fmt.Fprintf(&banner, "  Registrar       %s  (health and metrics %s)\n", reg.srv.Addr(), httpURL(addrString(reg.srv.HealthAddr())))
	fmt.Fprintf(&banner, "  Control plane   %s  (southbound %s, health and metrics %s)\n", cp.srv.NorthboundAddr(), cp.srv.SouthboundAddr(), httpURL(cp.srv.MetricsAddr()))
	fab.printBanner(&banner)
	_, _ = io.WriteString(a.out, banner.String())
	log.Info("dev environment ready", "nats", ns.ClientURL(), "registrar", reg.srv.Addr().String(), "controlplane", cp.srv.NorthboundAddr())
	<-ctx.Done()
	fmt.Fprintln(a.out, "switchboard dev: shutting down")
	fabErr := fab.stop()
	cpErr := stopControlPlane()
	return errors.Join(fabErr, cpErr, stopRegistrar())
}

// prepareStoreDir creates the embedded NATS server's store directory, emptied first
// with reset, and says for the banner whether the registry was kept from an earlier
// run: a registration from yesterday that is still there surprises nobody told so.
func prepareStoreDir(dir string, reset bool) (string, error) {
	if reset {
		if err := os.RemoveAll(dir); err != nil {
			return "", fmt.Errorf("--reset: %w", err)
		}
	}
	entries, err := os.ReadDir(dir)
	kept := err == nil && len(entries) > 0
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return "", fmt.Errorf("--data-dir: %w", err)
	}
	switch {
	case kept:
		return "the registry kept from the last run; --reset empties it", nil
	case reset:
		return "emptied by --reset", nil
	}
	return "kept across restarts; --reset empties it", nil
}

// httpURL prints an HTTP listener's address as a URL, or "off" for none.
func httpURL(addr string) string {
	if addr == "" {
		return "off"
	}
	return "http://" + addr
}

func addrString(a net.Addr) string {
	if a == nil {
		return ""
	}
	return a.String()
}

// devControlPlane is the control plane dev runs: API mode, in-memory store.
type devControlPlane struct {
	srv  *server.Server
	done chan error
}

func devControlPlaneConfig(o devOptions) *config.Config {
	cfg := defaultControlPlaneConfig()
	cfg.Northbound.Endpoint, cfg.Southbound.Endpoint = o.cpNorthbound, o.cpSouthbound
	return cfg
}

func startDevControlPlane(ctx context.Context, o devOptions, log *slog.Logger) (*devControlPlane, error) {
	srv, err := server.New(ctx, server.Options{Config: devControlPlaneConfig(o), Logger: log, MetricsListen: o.cpMetrics})
	if err != nil {
		return nil, err
	}
	cp := &devControlPlane{srv: srv, done: make(chan error, 1)}
	go func() { cp.done <- srv.Run(ctx) }()
	return cp, nil
}

func (cp *devControlPlane) stop() error { return <-cp.done }

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
		_ = backend.Close()
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
