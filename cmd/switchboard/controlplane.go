package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/switchboard-mesh/switchboard/controlplane/config"
	"github.com/switchboard-mesh/switchboard/controlplane/server"
)

func init() { subcommands = append(subcommands, newControlPlaneCmd) }

type controlPlaneOptions struct {
	configFile    string
	metricsListen string
}

func newControlPlaneCmd(a *app) *cobra.Command {
	var o controlPlaneOptions
	cmd := &cobra.Command{
		Use:   "controlplane",
		Short: "Run a control plane: links and routes between data-plane nodes",
		Long: `Run the control plane: data-plane nodes connect to its southbound endpoint, operators
and 'switchboard ctl' to its northbound endpoint. Without --config it runs in API
mode with an in-memory store on 127.0.0.1:50051 (northbound) and 127.0.0.1:50052
(southbound). The config file's format is the spec's Configuration Reference:
northbound, southbound, database, topology, registration_auth, reconciler, tracing.`,
		Example: `  switchboard controlplane
  switchboard controlplane --config /etc/switchboard/controlplane.yaml --metrics-listen :50053`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runControlPlane(cmd, a, o) },
	}
	cmd.Flags().StringVar(&o.configFile, "config", "", "control plane config file (YAML); default: API mode, in-memory store, loopback endpoints")
	cmd.Flags().StringVar(&o.metricsListen, "metrics-listen", "127.0.0.1:50053", "address for /healthz, /readyz and /metrics (empty: none)")
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

func runControlPlane(cmd *cobra.Command, a *app, o controlPlaneOptions) error {
	cfg, err := loadControlPlaneConfig(cmd, a, o.configFile)
	if err != nil {
		return err
	}
	log := a.logger()
	srv, err := server.New(cmd.Context(), server.Options{Config: cfg, Logger: log, MetricsListen: o.metricsListen})
	if err != nil {
		return err
	}
	fmt.Fprintf(a.out, "switchboard controlplane is running (Ctrl-C to stop)\n")
	fmt.Fprintf(a.out, "  northbound  %s\n", srv.NorthboundAddr())
	fmt.Fprintf(a.out, "  southbound  %s\n", srv.SouthboundAddr())
	if addr := srv.MetricsAddr(); addr != "" {
		fmt.Fprintf(a.out, "  metrics     http://%s/metrics\n", addr)
	}
	fmt.Fprintf(a.out, "  mode        %s, database %s\n", srv.Service().Mode(), cfg.Database.Type)
	err = srv.Run(cmd.Context())
	fmt.Fprintln(a.out, "switchboard controlplane: stopped")
	return err
}
