package xds

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"sync"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	clusterservice "github.com/envoyproxy/go-control-plane/envoy/service/cluster/v3"
	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	endpointservice "github.com/envoyproxy/go-control-plane/envoy/service/endpoint/v3"
	listenerservice "github.com/envoyproxy/go-control-plane/envoy/service/listener/v3"
	routeservice "github.com/envoyproxy/go-control-plane/envoy/service/route/v3"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"

	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/internal/grpcstop"
)

// Options configure a Server.
type Options struct {
	Logger *slog.Logger
	// GRPCOptions are added to the gRPC server's options (TLS credentials, say).
	GRPCOptions []grpc.ServerOption
	// StopTimeout bounds the graceful stop on shutdown; default 2s.
	StopTimeout time.Duration
}

// Server serves the agent's view of the registry over xDS. Feed it with Update (it
// is an agent.Output); Serve answers clients. Until the first Update no resource
// exists and clients wait, so a proxy never sees an empty set before the registry
// was read.
type Server struct {
	ln    net.Listener
	opts  Options
	log   *slog.Logger
	cache cachev3.SnapshotCache
	m     *metrics
	track *tracker

	mu      sync.Mutex
	serial  uint64
	current [len(nodeGroups)][]string // per group, the version of each type in typeURLs order
}

// Node groups: Envoy nodes get no listeners, since Envoy accepts an API listener only
// from its bootstrap and would reject ours; proxyless gRPC clients get everything.
const (
	groupEnvoy     = "envoy"
	groupProxyless = "proxyless"
)

var nodeGroups = [...]string{groupEnvoy, groupProxyless}

// nodeGroup maps every node onto one of two shared snapshots: all nodes see the same
// registry, so there is no per-node state to keep.
type nodeGroup struct{}

func (nodeGroup) ID(n *corev3.Node) string {
	if n.GetUserAgentName() == "envoy" {
		return groupEnvoy
	}
	return groupProxyless
}

// New returns a server that will answer on ln.
func New(ln net.Listener, o Options) *Server {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.StopTimeout <= 0 {
		o.StopTimeout = 2 * time.Second
	}
	s := &Server{ln: ln, opts: o, log: o.Logger.With("component", "xds"), m: newMetrics()}
	s.cache = cachev3.NewSnapshotCache(false, nodeGroup{}, nil)
	s.track = newTracker(s.m, s.log)
	return s
}

// Addr is the address the server answers on.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// Name identifies the server among the agent's outputs.
func (s *Server) Name() string { return "xds" }

// Update makes eps the served state; it reports whether any resource changed.
// Resources that would fail their own proto validation are never served: the error
// leaves the previous state in place.
func (s *Server) Update(ctx context.Context, eps []endpoint.Endpoint) (bool, error) {
	res, err := build(eps)
	if err != nil {
		return false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	changed := false
	for g, group := range nodeGroups {
		snap := &cachev3.Snapshot{}
		versions := make([]string, len(typeURLs))
		for i, t := range typeURLs {
			list := res.byType(t)
			if group == groupEnvoy && t == resource.ListenerType {
				list = nil
			}
			if versions[i], err = version(list); err != nil {
				return false, err
			}
			snap.Resources[cachev3.GetResponseType(t)] = cachev3.NewResources(versions[i], list)
		}
		if s.current[g] != nil && slices.Equal(s.current[g], versions) {
			continue
		}
		if err := s.cache.SetSnapshot(ctx, group, snap); err != nil {
			return false, fmt.Errorf("xds: set snapshot: %w", err)
		}
		s.current[g], changed = versions, true
	}
	if changed {
		s.serial++
		s.m.setResources(res)
		s.log.Debug("xds snapshot updated", "serial", s.serial, "clusters", len(res.clusters), "listeners", len(res.listeners))
	}
	return changed, nil
}

// lastVersion returns the version of typeURL a node group was last given.
func (s *Server) lastVersion(group, typeURL string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	for g, name := range nodeGroups {
		if name != group || s.current[g] == nil {
			continue
		}
		for i, t := range typeURLs {
			if t == typeURL {
				return s.current[g][i]
			}
		}
	}
	return ""
}

// Serve answers xDS clients until ctx ends. On the way out it stops accepting,
// ends the open streams (proxies keep their last configuration and reconnect) and
// returns nil.
func (s *Server) Serve(ctx context.Context) error {
	xds := serverv3.NewServer(ctx, s.cache, s.track.callbacks())
	gs := grpc.NewServer(append([]grpc.ServerOption{
		// Proxies hold one stream for hours; pings find the dead ones.
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 30 * time.Second, Timeout: 10 * time.Second}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
	}, s.opts.GRPCOptions...)...)
	discoverygrpc.RegisterAggregatedDiscoveryServiceServer(gs, xds)
	endpointservice.RegisterEndpointDiscoveryServiceServer(gs, xds)
	clusterservice.RegisterClusterDiscoveryServiceServer(gs, xds)
	routeservice.RegisterRouteDiscoveryServiceServer(gs, xds)
	listenerservice.RegisterListenerDiscoveryServiceServer(gs, xds)

	errc := make(chan error, 1)
	go func() { errc <- gs.Serve(s.ln) }()
	s.log.Info("serving xDS", "addr", s.ln.Addr().String())
	select {
	case err := <-errc:
		return fmt.Errorf("xds server: %w", err)
	case <-ctx.Done():
	}
	grpcstop.Stop(gs, s.opts.StopTimeout)
	if err := <-errc; err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return fmt.Errorf("xds server: %w", err)
	}
	return nil
}

// Demand returns the services the connected clients asked for; all is true while a
// client subscribes to every cluster or listener (Envoy's CDS wildcard does).
func (s *Server) Demand() (services []string, all bool) { return s.track.demand() }

// DemandChanged receives a value after Demand's answer may have changed.
func (s *Server) DemandChanged() <-chan struct{} { return s.track.changed }

// Describe and Collect export the server's metrics: Run registers a Server that is a
// prometheus.Collector on the agent's /metrics.
func (s *Server) Describe(ch chan<- *prometheus.Desc) { s.m.Describe(ch) }

// Collect implements prometheus.Collector.
func (s *Server) Collect(ch chan<- prometheus.Metric) { s.m.Collect(ch) }
