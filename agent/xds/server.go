package xds

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
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

	mu     sync.Mutex
	serial uint64
	res    *resources          // the last built; nil before the first Update
	views  map[view]*viewState // the snapshots kept, one per view
}

// view is what one kind of client is served, and the snapshot cache's key for it.
// Envoy nodes get no listeners, since Envoy accepts an API listener only from its
// bootstrap and would reject ours; proxyless gRPC clients get everything. A client
// that gave its locality gets load assignments whose priorities prefer its zone,
// then its region.
//
// Cost: one snapshot per distinct (kind, region, zone) among the connected clients,
// not per client: clients in one zone share theirs. Each Update builds and hashes the
// load assignments once per such locality (the other types are built once), so its
// work grows with the number of distinct client localities, and a push reaches only
// the localities whose load assignments changed. A locality's snapshot is dropped
// when its last stream closes. A stream stays in its first view: one whose node
// names another mid-stream is ended, and the client reconnects (errViewChanged).
type view struct {
	envoy bool
	loc   clientLocality
}

func viewOf(n *corev3.Node) view {
	return view{envoy: n.GetUserAgentName() == "envoy", loc: localityOf(n)}
}

// key is the view's snapshot cache key. Without a locality it is the kind alone, as
// before localities were served; a locality is quoted, since a client may send any
// text in it.
func (v view) key() string {
	k := map[bool]string{true: "envoy", false: "proxyless"}[v.envoy]
	if v.loc.known() {
		k += " " + strconv.Quote(v.loc.region) + " " + strconv.Quote(v.loc.zone)
	}
	return k
}

// viewState is a view's open streams and the version of each type it was last
// given, in typeURLs order.
type viewState struct {
	streams  int
	versions []string
}

// nodeViews maps every node onto its view's shared snapshot: there is no per-node
// state to keep.
type nodeViews struct{}

func (nodeViews) ID(n *corev3.Node) string { return viewOf(n).key() }

// New returns a server that will answer on ln.
func New(ln net.Listener, o Options) *Server {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.StopTimeout <= 0 {
		o.StopTimeout = 2 * time.Second
	}
	s := &Server{ln: ln, opts: o, log: o.Logger.With("component", "xds"), m: newMetrics(),
		// The two views without a locality always exist: a client that sends none
		// finds its snapshot there from the first Update on, as before.
		views: map[view]*viewState{{envoy: true}: {}, {envoy: false}: {}}}
	s.m.views.Set(float64(len(s.views)))
	s.cache = cachev3.NewSnapshotCache(false, nodeViews{}, nil)
	s.track = newTracker(s.m, s.log, s)
	return s
}

// Update makes eps the served state, for every view kept; it reports whether any
// resource changed. Resources that would fail their own proto validation are never
// served: the error leaves the previous state in place (for a client locality whose
// load assignments alone fail, that locality's, while the others move on).
func (s *Server) Update(ctx context.Context, eps []endpoint.Endpoint) (bool, error) {
	res, err := build(eps)
	if err != nil {
		return false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.res = &res
	changed := false
	var errs []error
	for v, st := range s.views {
		c, err := s.publish(ctx, v, st)
		changed = changed || c
		errs = append(errs, err)
	}
	if changed {
		s.serial++
		s.m.setResources(res)
		s.log.Debug("xds snapshot updated", "serial", s.serial, "clusters", len(res.clusters),
			"listeners", len(res.listeners), "views", len(s.views))
	}
	return changed, errors.Join(errs...)
}

// publish sets v's snapshot from s.res when a version differs from what v was last
// given; s.mu is held.
func (s *Server) publish(ctx context.Context, v view, st *viewState) (bool, error) {
	if s.res == nil {
		return false, nil // no Update yet: clients wait
	}
	snap := &cachev3.Snapshot{}
	versions := slices.Clone(s.res.versions)
	for i, t := range typeURLs {
		list := s.res.byType(t)
		var err error
		switch {
		case t == resource.ListenerType && v.envoy:
			list = nil
			versions[i], err = version(nil)
		case t == resource.EndpointType && v.loc.known():
			if list, err = s.res.forLocality(v.loc); err == nil {
				versions[i], err = version(list)
			}
		}
		if err != nil {
			return false, err
		}
		snap.Resources[cachev3.GetResponseType(t)] = cachev3.NewResources(versions[i], list)
	}
	if st.versions != nil && slices.Equal(st.versions, versions) {
		return false, nil
	}
	if err := s.cache.SetSnapshot(ctx, v.key(), snap); err != nil {
		return false, fmt.Errorf("xds: set snapshot %s: %w", v.key(), err)
	}
	st.versions = versions
	return true, nil
}

// acquire counts a stream of view v, giving v a snapshot of the current state if it
// has none: the tracker calls it on a stream's first request with a node, before the
// server asks the cache for that request's resources.
func (s *Server) acquire(v view) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.views[v]
	if st == nil {
		st = &viewState{}
		s.views[v] = st
		s.m.views.Set(float64(len(s.views)))
		if _, err := s.publish(context.Background(), v, st); err != nil {
			s.log.Warn("xds snapshot for a client locality not built", "view", v.key(), "err", err)
		}
	}
	st.streams++
}

// release undoes acquire when a stream closes (a stream keeps its first view until
// then: see errViewChanged); a locality's snapshot goes with its last stream, so a
// client cannot grow the cache by naming localities. The views without a locality
// stay.
func (s *Server) release(v view) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.views[v]
	if st == nil {
		return
	}
	if st.streams--; st.streams > 0 || !v.loc.known() {
		return
	}
	delete(s.views, v)
	s.m.views.Set(float64(len(s.views)))
	s.cache.ClearSnapshot(v.key())
}

// Addr is the address the server answers on.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// Name identifies the server among the agent's outputs.
func (s *Server) Name() string { return "xds" }

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
