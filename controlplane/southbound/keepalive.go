package southbound

import (
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
)

// Keepalive of the nodes' connections. A node's connection the control plane has read
// nothing from for KeepaliveTime is pinged, and closed when the ping is not answered
// within KeepaliveTimeout: the stream of a node whose path went silent (open,
// delivering nothing) ends within their sum, 6 s — sooner than the send timeout
// (10 s) evicts a node that stops reading — and the node is disconnected as after a
// crash, its links failing over. A silence shorter than KeepaliveTimeout (4 s) never
// ends a stream.
//
// The southbound grpc.Server must be built with ServerOptions: without them gRPC
// never pings, and refuses the nodes' pings (every 10 s) as too frequent.
const (
	KeepaliveTime    = 2 * time.Second
	KeepaliveTimeout = 4 * time.Second
	// MinNodePingInterval is the most often a node may ping (nodes ping every 10 s,
	// gRPC's minimum for clients); pings more frequent than that close the connection
	// (ENHANCE_YOUR_CALM).
	MinNodePingInterval = 5 * time.Second
)

// ServerOptions are the options the southbound grpc.Server needs besides its
// credentials: keepalive both ways.
func ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: KeepaliveTime, Timeout: KeepaliveTimeout}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: MinNodePingInterval, PermitWithoutStream: true}),
	}
}
