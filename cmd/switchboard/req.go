package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/switchboard-mesh/switchboard/dataplane/node"
	nodev1 "github.com/switchboard-mesh/switchboard/gen/switchboard/node/v1"
)

func init() { subcommands = append(subcommands, newReqCmd) }

func newReqCmd(a *app) *cobra.Command {
	var (
		f       nodeClientFlags
		timeout time.Duration
	)
	cmd := &cobra.Command{
		Use:   "req --node ADDR NAME MESSAGE",
		Short: "Send a request to a name through a node and print the answer",
		Long: `Send MESSAGE as a request to one subscriber of NAME (nearest first, as pub does
without --broadcast) through the node at --node, wait up to --timeout for its answer
and print it. A subscriber sees the request as a message with a reply token and
answers it through its node's Respond call (sub --reply does, for scripts).
Exit code 1 when nobody subscribes to NAME, or the subscriber leaves before
answering (at once, without waiting for the timeout), or when no answer comes in
time; 2 when MESSAGE is larger than the node's message limit.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if timeout <= 0 || timeout > node.MaxRequestTimeout {
				return usagef("--timeout %s: want more than 0 and at most %s", timeout, node.MaxRequestTimeout)
			}
			name, cc, err := f.open(args[0])
			if err != nil {
				return err
			}
			defer func() { _ = cc.Close() }()
			resp, err := nodev1.NewNodeServiceClient(cc).Request(cmd.Context(), &nodev1.RequestRequest{
				Name: node.NameProto(name), Payload: []byte(args[1]), TimeoutMs: uint32(timeout.Milliseconds()),
			})
			if err != nil {
				return fmt.Errorf("request to %s: %w", name, err)
			}
			_, err = fmt.Fprintf(a.out, "%s\n", resp.GetPayload())
			return err
		},
	}
	f.register(cmd)
	cmd.Flags().DurationVar(&timeout, "timeout", node.DefaultRequestTimeout, "how long to wait for the answer")
	return cmd
}
