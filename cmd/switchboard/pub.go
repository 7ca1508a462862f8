package main

import (
	"fmt"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/switchboard-mesh/switchboard/dataplane"
	"github.com/switchboard-mesh/switchboard/dataplane/node"
	nodev1 "github.com/switchboard-mesh/switchboard/gen/switchboard/node/v1"
)

func init() { subcommands = append(subcommands, newPubCmd) }

// nodeClientFlags are the flags of the commands that talk to a node's client API.
type nodeClientFlags struct {
	addr   string
	framed bool
	tls    clientTLSFlags
}

func (f *nodeClientFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.addr, "node", "127.0.0.1:46357", "the node's client API address")
	cmd.Flags().BoolVar(&f.framed, "framed", false, "call the node on its framed transport instead of gRPC (lower latency; a connection per call)")
	f.tls.register(cmd.Flags(), "")
}

// nodeConn is a connection to a node's client API, on either transport.
type nodeConn interface {
	grpc.ClientConnInterface
	Close() error
}

// open parses the name pub or sub was given (a usage error if malformed) and
// connects to the node.
func (f *nodeClientFlags) open(arg string) (dataplane.Name, nodeConn, error) {
	name, err := node.ParseName(arg)
	if err != nil {
		return name, nil, usageError{err}
	}
	cc, err := f.dial()
	return name, cc, err
}

func (f *nodeClientFlags) dial() (nodeConn, error) {
	conf, err := f.tls.config()
	if err != nil {
		return nil, err
	}
	if f.framed {
		return node.NewFramedClient(f.addr, node.FramedOptions{TLS: conf}), nil
	}
	creds := insecure.NewCredentials()
	if conf != nil {
		creds = credentials.NewTLS(conf)
	}
	return grpc.NewClient(f.addr, append(node.ClientOptions(), grpc.WithTransportCredentials(creds))...)
}

func newPubCmd(a *app) *cobra.Command {
	var (
		f         nodeClientFlags
		broadcast bool
	)
	cmd := &cobra.Command{
		Use:   "pub --node ADDR NAME MESSAGE",
		Short: "Publish a message to a name (org/namespace/service[/instance]) through a node",
		Long: `Publish MESSAGE to NAME through the node at --node. Without an instance id it goes to
one subscriber of the service, nearest first; with one, to that instance; with
--broadcast, to every subscriber. Exit code 1 when nobody subscribes to NAME.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			name, cc, err := f.open(args[0])
			if err != nil {
				return err
			}
			defer func() { _ = cc.Close() }()
			resp, err := nodev1.NewNodeServiceClient(cc).Publish(cmd.Context(), &nodev1.PublishRequest{
				Name: node.NameProto(name), Payload: []byte(args[1]), Broadcast: broadcast,
			})
			if err != nil {
				return fmt.Errorf("publish %s: %w", name, err)
			}
			fmt.Fprintf(a.out, "published to %s: %d copies forwarded, %d dropped\n", name, resp.GetForwarded(), resp.GetDropped())
			return nil
		},
	}
	f.register(cmd)
	cmd.Flags().BoolVar(&broadcast, "broadcast", false, "deliver to every subscriber of the name")
	return cmd
}
