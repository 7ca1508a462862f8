package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"

	"github.com/switchboard-mesh/switchboard/controlplane"
	"github.com/switchboard-mesh/switchboard/controlplane/access"
	"github.com/switchboard-mesh/switchboard/controlplane/config"
	"github.com/switchboard-mesh/switchboard/controlplane/groupsecrets"
	"github.com/switchboard-mesh/switchboard/controlplane/nodestream"
	"github.com/switchboard-mesh/switchboard/controlplane/northbound"
	"github.com/switchboard-mesh/switchboard/controlplane/reconcile"
	"github.com/switchboard-mesh/switchboard/controlplane/southbound"
	"github.com/switchboard-mesh/switchboard/controlplane/statuspage"
	"github.com/switchboard-mesh/switchboard/controlplane/store"
	controllerv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/controller/v1"
	controlplanev1 "github.com/switchboard-mesh/switchboard/gen/switchboard/controlplane/v1"
	"github.com/switchboard-mesh/switchboard/internal/tracing"
	"github.com/switchboard-mesh/switchboard/nodeauth"
)

// Options configure a Server. Only Config is required.
type Options struct {
	Config *config.Config
	Logger *slog.Logger
	// MetricsListen is the HTTP address for /healthz, /readyz and /metrics; empty
	// serves no HTTP.
	MetricsListen string
	// Metrics receives the control plane's series; nil makes a new registry (never the
	// global one).
	Metrics *prometheus.Registry
	// Auth replaces the authenticator Config.RegistrationAuth describes (tests verify
	// SPIFFE tokens against a fixed bundle this way); what the listeners may expose is
	// still judged by Config.RegistrationAuth.
	Auth nodeauth.Authenticator
	// RequestTimeout bounds each request to a node; nodestream.DefaultTimeout (90 s)
	// when zero.
	RequestTimeout time.Duration
	// RegisterTimeout bounds the registration handshake; 15 s when zero.
	RegisterTimeout time.Duration
	// StopTimeout bounds the graceful stop of the northbound server; 5 s when zero.
	StopTimeout time.Duration
	// Links are the settings injected into every link's client configuration; when
	// zero, the config file's links section applies.
	Links controlplane.LinkSettings
	// Store replaces the store Config.Database describes; the server closes it.
	Store store.Store
	// AuditLogger receives one line per successful northbound mutation (each with
	// audit=true); Logger when nil.
	AuditLogger *slog.Logger
	// StatusRefresh is how often an open status page updates itself; 2 s when zero.
	StatusRefresh time.Duration
}

// Server is a control plane: create it with New, serve with Run.
type Server struct {
	o       Options
	log     *slog.Logger
	store   store.Store
	svc     *controlplane.Service
	auth    nodeauth.Authenticator
	access  *access.Authorizer
	streams *nodestream.Handler
	south   *southbound.Server
	links   *reconcile.Queue
	routes  *reconcile.Queue
	metrics *metrics
	secrets *groupsecrets.Manager
	recent  *statuspage.ErrorLog // reconcile errors for the status page

	sgrpc, ngrpc     *grpc.Server
	slis, nlis, hlis net.Listener
	http             *http.Server
	health           *health.Server

	ready   atomic.Bool
	runOnce sync.Once
	ha      *ha // nil unless the store is on etcd
}

// New opens the store, starts the service in the configured mode and binds every
// listener. On error nothing stays open.
func New(ctx context.Context, o Options) (_ *Server, err error) {
	if o.Config == nil {
		return nil, errors.New("controlplane server: Options.Config is required")
	}
	if err := o.Config.CheckListeners(); err != nil {
		return nil, err
	}
	s := &Server{o: o, log: o.Logger}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	var closers []func()
	defer func() {
		if err != nil {
			for i := len(closers) - 1; i >= 0; i-- {
				closers[i]()
			}
		}
	}()
	if s.store = o.Store; s.store == nil {
		if s.store, err = openStore(ctx, o.Config.Database); err != nil {
			return nil, err
		}
	}
	closers = append(closers, func() { _ = s.store.Close() })
	links := o.Links
	if links == (controlplane.LinkSettings{}) {
		links = controlplane.LinkSettings(o.Config.Links)
	}
	s.svc, err = controlplane.New(ctx, controlplane.Options{
		Store: s.store, Topology: o.Config.Topology, Logger: s.log.With("component", "service"), Links: links,
		Deferred: isEtcd(s.store), // the elected replica resets, when it takes the lead
	})
	if err != nil {
		return nil, err
	}
	if s.auth, err = openAuth(ctx, o); err != nil {
		return nil, err
	}
	closers = append(closers, func() { _ = s.auth.Close() })
	s.streams = nodestream.New(o.RequestTimeout, nodestream.WithSendTimeout(o.Config.SendTimeout))
	s.metrics = newMetrics(o.Metrics, s)
	if err := s.openAccess(); err != nil {
		return nil, err
	}
	s.buildReconcilers()
	if err := s.openGroupSecrets(ctx); err != nil {
		return nil, err
	}
	if err := s.buildServers(); err != nil {
		return nil, err
	}
	if err := s.listen(&closers); err != nil {
		return nil, err
	}
	if err := s.openHA(); err != nil {
		return nil, err
	}
	return s, nil
}

// buildReconcilers makes the two queues, each reconciler poking the other's queue.
func (s *Server) buildReconcilers() {
	rc := s.o.Config.Reconciler
	s.recent = statuspage.NewErrorLog(0)
	queue := func(name string, sync func(context.Context, string) error) *reconcile.Queue {
		metrics, recent := s.metrics.observe(name), s.recent.Observe(name)
		return reconcile.NewQueue(reconcile.QueueConfig{
			Name: name, Workers: rc.Workers, BaseDelay: rc.BaseRetryDelay, MaxRequeues: rc.MaxRequeues,
			Logger: s.log.With("component", name+"-reconciler"),
			OnResult: func(key string, took time.Duration, err error) {
				metrics(key, took, err)
				recent(key, took, err)
			},
		}, sync)
	}
	links := reconcile.NewLinks(reconcile.LinkOptions{
		Store: s.store, Nodes: s.streams, OrphanDetection: rc.EnableOrphanDetection,
		EnqueueRoutes: func(ids ...string) { s.routes.Add(ids...) }, Logger: s.log.With("component", "link-reconciler"),
	})
	routes := reconcile.NewRoutes(reconcile.RouteOptions{
		Store: s.store, Nodes: s.streams,
		EnqueueLinks: func(ids ...string) { s.links.Add(ids...) }, Logger: s.log.With("component", "route-reconciler"),
	})
	s.links = queue("link", links.Sync)
	s.routes = queue("route", routes.Sync)
}

func (s *Server) buildServers() error {
	cfg := s.o.Config
	sopts, err := serverOptions(cfg.Southbound.TLS)
	if err != nil {
		return fmt.Errorf("southbound: %w", err)
	}
	// With tracing on, calls get server spans, but not the nodes' control
	// channels: a stream open for as long as the node runs.
	sopts = append(sopts, tracing.ServerOptions("/"+controllerv1.ControllerService_ServiceDesc.ServiceName+"/")...)
	// Keepalive both ways: a silent node's stream ends within seconds, and the
	// nodes' own pings are admitted.
	sopts = append(sopts, southbound.ServerOptions()...)
	// Stop waits for stream handlers, so no disconnect is processed after the store
	// closes.
	s.sgrpc = grpc.NewServer(append(sopts, grpc.WaitForHandlers(true), s.southboundGate())...)
	s.south = southbound.New(southbound.Options{
		Service: s.svc, Streams: s.streams, Auth: s.auth, Enqueue: s.Enqueue,
		RegisterTimeout: s.o.RegisterTimeout, OnRegistration: s.metrics.registration,
		Logger: s.log.With("component", "southbound"),
	})
	s.south.Register(s.sgrpc)
	s.health = newHealth()
	introspect(s.sgrpc, s.health)
	nopts, err := serverOptions(cfg.Northbound.TLS)
	if err != nil {
		return fmt.Errorf("northbound: %w", err)
	}
	nopts = append(nopts, tracing.ServerOptions()...)
	s.ngrpc = grpc.NewServer(append(append(nopts, s.access.ServerOptions()...), s.northboundGate())...)
	controlplanev1.RegisterControlPlaneServiceServer(s.ngrpc,
		northbound.New(s.svc, s.streams, s.Enqueue, s.log.With("component", "northbound"), northbound.WithGroupSecrets(s.secrets)))
	introspect(s.ngrpc, s.health)
	return nil
}

func (s *Server) listen(closers *[]func()) error {
	var err error
	if s.slis, err = net.Listen("tcp", s.o.Config.Southbound.Endpoint); err != nil {
		return fmt.Errorf("southbound: listen %s: %w", s.o.Config.Southbound.Endpoint, err)
	}
	*closers = append(*closers, func() { s.slis.Close() })
	if s.nlis, err = net.Listen("tcp", s.o.Config.Northbound.Endpoint); err != nil {
		return fmt.Errorf("northbound: listen %s: %w", s.o.Config.Northbound.Endpoint, err)
	}
	*closers = append(*closers, func() { s.nlis.Close() })
	if s.o.MetricsListen == "" {
		return nil
	}
	if s.hlis, err = net.Listen("tcp", s.o.MetricsListen); err != nil {
		return fmt.Errorf("metrics: listen %s: %w", s.o.MetricsListen, err)
	}
	s.http = &http.Server{Handler: s.httpHandler(), ReadHeaderTimeout: 10 * time.Second}
	return nil
}

// SouthboundAddr is the address data-plane nodes dial.
func (s *Server) SouthboundAddr() string { return s.slis.Addr().String() }

// NorthboundAddr is the management API's address.
func (s *Server) NorthboundAddr() string { return s.nlis.Addr().String() }

// MetricsAddr is the HTTP address, "" when there is none.
func (s *Server) MetricsAddr() string {
	if s.hlis == nil {
		return ""
	}
	return s.hlis.Addr().String()
}

// Service is the core service (for tests and tools in the same process).
func (s *Server) Service() *controlplane.Service { return s.svc }

// Store is the store the control plane writes.
func (s *Server) Store() store.Store { return s.store }

// Streams is the node command handler.
func (s *Server) Streams() *nodestream.Handler { return s.streams }

// Enqueue hands the outcome of an event to the reconcilers.
func (s *Server) Enqueue(res controlplane.Result) {
	s.links.Add(res.LinkNodes...)
	s.routes.Add(res.RouteNodes...)
	for _, p := range res.Problems {
		s.log.Warn("topology problem", "err", p)
	}
}
