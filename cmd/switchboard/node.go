package main

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/switchboard-mesh/switchboard/dataplane/node"
	"github.com/switchboard-mesh/switchboard/dataplane/node/nodeconfig"
)

func init() { subcommands = append(subcommands, newNodeCmd) }

// nodeOptions are the node's flags; everything else is in its configuration file.
type nodeOptions struct {
	config       string
	insecure     bool
	peerIdentity string
	// subQueueLen and slowConsumer override limits.subscriber_queue_len and
	// limits.slow_consumer (0 and "": keep the file's).
	subQueueLen  int
	slowConsumer string
	// linkTransport overrides link_transport ("": keep the file's).
	linkTransport string
}

func newNodeCmd(a *app) *cobra.Command {
	var o nodeOptions
	cmd := &cobra.Command{
		Use:   "node --config FILE",
		Short: "Run a reference data-plane node: links, routes and forwarding, driven by the control plane",
		Long: `Run a data-plane node. It registers with the control plane, dials and accepts the
links the control plane asks for, forwards messages along the routes it
installs, peers with the other nodes of its group (found through the registry), and
serves local clients ('switchboard pub', 'sub' and 'req'). See docs/dataplane.md for
the configuration file. A local subscriber that falls --subscriber-queue-len messages
behind is cut off as a slow consumer (--slow-consumer drop keeps it and drops instead).

Links and peerings run on the node's own framed transport (length-prefixed batches on
the TCP or TLS connection); --link-transport grpc dials them as gRPC streams instead,
for a fleet whose older nodes accept only those. The listener accepts both.

Security. With mTLS (tls with ca_file, or spiffe_socket), a node that dials this one is
who its certificate says: its SPIFFE ID is mapped to a group and a node id by
--peer-identity-pattern (default: the trust domain is the group, the last path segment
the node, so spiffe://cloud/node/n1 is node n1 of group cloud). A dialer whose stream
metadata claims another node or group, whose certificate has no such identity, or that
presents a link id of another group, is refused with PERMISSION_DENIED, logged and
counted (switchboard_node_peer_identity_denied_total). A message that comes in from
another node keeps at most limits.max_hops hops.

Without mTLS the node cannot tell who dials it, so it listens on loopback only: a
listen address on another interface, in plaintext or with TLS but no ca_file, exits
with status 2 unless --insecure (allow_insecure_remote: true in the file) says it is
meant, and then logs a warning.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.config == "" {
				return usagef("--config is required")
			}
			return runNode(cmd, a, o)
		},
	}
	cmd.Flags().StringVar(&o.config, "config", "", "node configuration file (YAML)")
	cmd.Flags().BoolVar(&o.insecure, "insecure", false, "allow a plaintext listener on a non-loopback address (logged as a warning): anyone who reaches it can join the group as any node")
	cmd.Flags().IntVar(&o.subQueueLen, "subscriber-queue-len", 0, fmt.Sprintf("messages queued for each local subscriber before it counts as a slow consumer (default %d; overrides limits.subscriber_queue_len)", node.DefaultSubscriberQueueLen))
	cmd.Flags().StringVar(&o.slowConsumer, "slow-consumer", "", "what becomes of a subscriber whose queue is full: disconnect (cut it off with RESOURCE_EXHAUSTED; the default) or drop (keep it, drop the copies it has no room for); overrides limits.slow_consumer")
	cmd.Flags().StringVar(&o.linkTransport, "link-transport", "", "how this node dials links and peerings: framed (the default) or grpc (while other nodes accept only gRPC); overrides link_transport")
	cmd.Flags().StringVar(&o.peerIdentity, "peer-identity-pattern", "", "regular expression with the groups (?P<group>...) and (?P<node>...) that maps a peer node's SPIFFE ID to its group and node id, with mTLS (default "+node.DefaultPeerIdentity+"; overrides peer_identity_pattern in the file)")
	return cmd
}

func runNode(cmd *cobra.Command, a *app, o nodeOptions) error {
	file, err := loadNodeConfig(o)
	if err != nil {
		return err
	}
	// No component attribute: every line of the node names it (node=group/id),
	// and its controller adds component=controller.
	log := a.logger()
	if file.UnauthenticatedRemote() {
		log.Warn(fmt.Sprintf("listening on %s without authenticating who dials (--insecure): anyone who reaches it can join group %s as any node, and publish and subscribe to anything", file.Listen, file.Group))
	}
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
}

// loadNodeConfig reads the file and applies the flags over it; what is wrong with the
// file or the listener is bad input (exit 2).
func loadNodeConfig(o nodeOptions) (*nodeconfig.File, error) {
	file, err := nodeconfig.Load(o.config)
	if err != nil {
		if errors.Is(err, nodeconfig.ErrInvalid) {
			return nil, usageError{err}
		}
		return nil, err
	}
	if o.peerIdentity != "" {
		if _, err := node.ParsePeerIdentity(o.peerIdentity); err != nil {
			return nil, usagef("--peer-identity-pattern: %v", err)
		}
		file.PeerIdentityPattern = o.peerIdentity
	}
	if err := applyLimitFlags(file, o); err != nil {
		return nil, err
	}
	switch o.linkTransport {
	case "":
	case node.TransportFramed, node.TransportGRPC:
		file.LinkTransport = o.linkTransport
	default:
		return nil, usagef("--link-transport %q: want %s or %s", o.linkTransport, node.TransportFramed, node.TransportGRPC)
	}
	file.AllowInsecureRemote = file.AllowInsecureRemote || o.insecure
	if err := file.CheckListen(); err != nil {
		return nil, usageError{err}
	}
	return file, nil
}

// applyLimitFlags sets the subscriber limits the flags give over the file's.
func applyLimitFlags(file *nodeconfig.File, o nodeOptions) error {
	if o.subQueueLen < 0 {
		return usagef("--subscriber-queue-len %d: must not be negative", o.subQueueLen)
	}
	if o.subQueueLen > 0 {
		file.Limits.SubscriberQueueLen = o.subQueueLen
	}
	if o.slowConsumer != "" {
		if _, err := node.ParseSlowConsumerPolicy(o.slowConsumer); err != nil {
			return usagef("--slow-consumer: %v", err)
		}
		file.Limits.SlowConsumer = o.slowConsumer
	}
	return nil
}
