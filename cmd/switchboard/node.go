package main

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/switchboard-mesh/switchboard/dataplane/node"
	"github.com/switchboard-mesh/switchboard/dataplane/node/nodeconfig"
)

func init() { subcommands = append(subcommands, newNodeCmd) }

func newNodeCmd(a *app) *cobra.Command {
	var path string
	cmd := &cobra.Command{
		Use:   "node --config FILE",
		Short: "Run a reference data-plane node: links, routes and forwarding, driven by the control plane",
		Long: `Run a data-plane node. It registers with the control plane, dials and accepts the
links the control plane asks for (gRPC streams), forwards messages along the routes it
installs, peers with the other nodes of its group (found through the registry), and
serves local clients ('switchboard pub' and 'switchboard sub'). See docs/dataplane.md
for the configuration file.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if path == "" {
				return usagef("--config is required")
			}
			file, err := nodeconfig.Load(path)
			if err != nil {
				if errors.Is(err, nodeconfig.ErrInvalid) {
					return usageError{err}
				}
				return err
			}
			// No component attribute: every line of the node names it (node=group/id),
			// and its controller adds component=controller.
			log := a.logger()
			cfg, res, err := file.Build(cmd.Context(), log)
			if err != nil {
				return err
			}
			defer func() { _ = res.Close() }()
			n, err := node.New(cfg)
			if err != nil {
				return err
			}
			fmt.Fprintf(a.out, "node %s listening on %s\n", n.ID(), n.Addr())
			return n.Run(cmd.Context())
		},
	}
	cmd.Flags().StringVar(&path, "config", "", "node configuration file (YAML)")
	return cmd
}
