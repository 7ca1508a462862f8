package main

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/switchboard-mesh/switchboard/controlplane/access"
	"github.com/switchboard-mesh/switchboard/controlplane/config"
	"github.com/switchboard-mesh/switchboard/controlplane/server"
)

func init() { subcommands = append(subcommands, newControlPlaneCmd) }

type controlPlaneOptions struct {
	configFile    string
	metricsListen string
	northbound    string
	southbound    string
	insecure      bool
	tracing       *tracingFlags
}

func newControlPlaneCmd(a *app) *cobra.Command {
	var o controlPlaneOptions
	cmd := &cobra.Command{
		Use:   "controlplane",
		Short: "Run a control plane: links and routes between data-plane nodes",
		Long: `Run the control plane: data-plane nodes connect to its southbound endpoint, operators
and 'switchboard ctl' to its northbound endpoint. Without --config it runs in API
mode with an in-memory store on 127.0.0.1:50051 (northbound) and 127.0.0.1:50052
(southbound). The config file (YAML, see docs/controlplane.md) has the sections
northbound, southbound, database, topology, registration_auth, reconciler, links
and tracing; --northbound-listen, --southbound-listen and --metrics-listen override
its addresses.

Secure by default: an endpoint without TLS listens on loopback only. A plaintext
endpoint on any other address, a northbound endpoint without
northbound.authorization (roles for client-certificate identities and bearer
tokens), or a southbound endpoint without registration_auth (shared_secret or
spire) is refused unless --insecure (allow_insecure_remote: true) says it is meant.

SIGHUP re-reads northbound.authorization.token_file: a token removed from the file
stops working. Every successful northbound mutation is logged with audit=true.`,
		Example: `  switchboard controlplane
  switchboard controlplane --northbound-listen 127.0.0.1:7051 --southbound-listen 127.0.0.1:7052
  switchboard controlplane --config /etc/switchboard/controlplane.yaml --metrics-listen :50053
  kill -HUP $(pidof switchboard)    # after editing the token file`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runControlPlane(cmd, a, o) },
	}
	cmd.Flags().StringVar(&o.configFile, "config", "", "control plane config file (YAML); default: API mode, in-memory store, loopback endpoints")
	cmd.Flags().StringVar(&o.northbound, "northbound-listen", "", "management API address (switchboard ctl); overrides northbound.endpoint (default 127.0.0.1:50051)")
	cmd.Flags().StringVar(&o.southbound, "southbound-listen", "", "address data-plane nodes connect to; overrides southbound.endpoint (default 127.0.0.1:50052)")
	cmd.Flags().StringVar(&o.metricsListen, "metrics-listen", "127.0.0.1:50053", "address for /healthz, /readyz and /metrics (empty: none)")
	o.tracing = addTracingFlags(cmd)
	cmd.Flags().BoolVar(&o.insecure, "insecure", false, "allow plaintext endpoints, a northbound API without authorization and a southbound endpoint without registration_auth on non-loopback addresses (logged as a warning)")
	return cmd
}

// defaultControlPlaneConfig is what runs without --config: nothing reachable from
// other machines until an operator says so.
func defaultControlPlaneConfig() *config.Config {
	c := config.Default()
	c.Northbound.Endpoint = "127.0.0.1:50051"
	c.Southbound.Endpoint = "127.0.0.1:50052"
	return c
}

func loadControlPlaneConfig(cmd *cobra.Command, a *app, path string) (*config.Config, error) {
	if path == "" {
		return defaultControlPlaneConfig(), nil
	}
	cfg, err := config.Load(path)
	if err != nil {
		return nil, usageError{fmt.Errorf("--config: %w", err)}
	}
	// The file's tracing level applies unless --log-level was given.
	if f := cmd.Flag("log-level"); f != nil && !f.Changed && cfg.Tracing.LogLevel != "" {
		a.logLevel = cfg.Tracing.LogLevel
		if a.logLevel == "trace" {
			a.logLevel = "debug"
		}
	}
	return cfg, nil
}

// controlPlaneStartError marks what an operator must fix in the config or the flags
// (exit 2), as opposed to a failure at run time.
func controlPlaneStartError(err error) error {
	if errors.Is(err, config.ErrInsecureListen) || errors.Is(err, access.ErrTokenFile) {
		return usageError{err}
	}
	return err
}

func runControlPlane(cmd *cobra.Command, a *app, o controlPlaneOptions) error {
	if err := checkListens("northbound-listen", o.northbound, "southbound-listen", o.southbound, "metrics-listen", o.metricsListen); err != nil {
		return err
	}
	if err := o.tracing.validate(); err != nil {
		return err
	}
	cfg, err := loadControlPlaneConfig(cmd, a, o.configFile)
	if err != nil {
		return err
	}
	// The flags win over the file, so moving a port needs no config file.
	if o.northbound != "" {
		cfg.Northbound.Endpoint = o.northbound
	}
	if o.southbound != "" {
		cfg.Southbound.Endpoint = o.southbound
	}
	cfg.AllowInsecureRemote = cfg.AllowInsecureRemote || o.insecure
	if err := cfg.CheckListeners(); err != nil {
		return controlPlaneStartError(err)
	}
	if err := probeListens("northbound-listen", cfg.Northbound.Endpoint, "southbound-listen", cfg.Southbound.Endpoint, "metrics-listen", o.metricsListen); err != nil {
		return err
	}
	log := a.logger()
	// Before the gRPC servers are made, which take their tracing options then;
	// the deferred stop flushes the spans after the servers have stopped.
	stopTracing, err := o.tracing.start(cmd.Context(), log, "switchboard-controlplane")
	if err != nil {
		return err
	}
	defer stopTracing()
	srv, err := server.New(cmd.Context(), server.Options{
		Config: cfg, Logger: log, MetricsListen: o.metricsListen, AuditLogger: a.auditLogger(),
	})
	if err != nil {
		return controlPlaneStartError(err)
	}
	// Installed before the banner, so a SIGHUP sent once the addresses are printed
	// reloads instead of killing the process (SIGHUP's default).
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	go func() {
		for {
			select {
			case <-cmd.Context().Done():
				return
			case <-hup:
				log.Info("SIGHUP: reloading the northbound token file")
				_ = srv.ReloadTokens() // logged and counted by the server; old tokens stay
			}
		}
	}()
	fmt.Fprintf(a.out, "switchboard controlplane is running (Ctrl-C to stop)\n")
	fmt.Fprintf(a.out, "  northbound  %s\n", srv.NorthboundAddr())
	fmt.Fprintf(a.out, "  southbound  %s\n", srv.SouthboundAddr())
	if addr := srv.MetricsAddr(); addr != "" {
		fmt.Fprintf(a.out, "  metrics     http://%s/metrics\n", addr)
	}
	fmt.Fprintf(a.out, "  mode        %s, database %s%s\n", srv.Service().Mode(), cfg.Database.Type, storeNote(srv.Service().Mode(), cfg.Database.Type))
	err = srv.Run(cmd.Context())
	fmt.Fprintln(a.out, "switchboard controlplane: stopped")
	return err
}

// storeNote tells the operator of an API-mode control plane on the in-memory store
// (the default without --config) what a restart loses.
func storeNote(mode config.Mode, database string) string {
	if mode != config.APIMode || database != config.DatabaseInMemory {
		return ""
	}
	return ": segments and links added through the API are lost on restart (a database of type sqlite or etcd in --config keeps them)"
}

// auditLogger writes audit lines at info whatever --log-level says: raising the level
// to quiet the logs must not silence the record of who changed what.
func (a *app) auditLogger() *slog.Logger {
	opts := &slog.HandlerOptions{Level: slog.LevelInfo}
	if a.logFormat == "json" {
		return slog.New(slog.NewJSONHandler(a.errOut, opts))
	}
	return slog.New(slog.NewTextHandler(a.errOut, opts))
}
