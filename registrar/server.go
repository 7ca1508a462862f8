package registrar

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"

	registrarv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/registrar/v1"
	"github.com/switchboard-mesh/switchboard/internal/grpcstop"
	"github.com/switchboard-mesh/switchboard/internal/tracing"
)

// ServerConfig configures a Server: a Registrar with its gRPC and HTTP endpoints.
type ServerConfig struct {
	Registrar Config
	// Listen is the gRPC address (--listen), e.g. ":9443" or "127.0.0.1:0".
	Listen string
	// HealthListen is the HTTP address for /healthz, /readyz and /metrics
	// (--health-listen); empty serves no HTTP.
	HealthListen string
	// TLS, when set, secures the gRPC port; for mTLS it verifies client certificates.
	TLS *tls.Config
	// Metrics gathers /metrics and receives the registrar's series; nil makes a new
	// registry (never the global one).
	Metrics *prometheus.Registry
	// StopTimeout bounds the graceful stop of the gRPC server; default 5s.
	StopTimeout time.Duration
	// DebugMemory serves GET /debug/memory on the health port: the heap and
	// goroutine stacks in use after a forced garbage collection, for measuring
	// what each watcher costs. Off by default: every request runs a full GC.
	DebugMemory bool
	// GRPCOptions are added to the gRPC server's own (ServerOptions).
	GRPCOptions []grpc.ServerOption
	// NoUI turns off the read-only web page the health port serves at /ui
	// (docs/registrar.md, "Web page"); UI configures it.
	NoUI bool
	UI   UIOptions
}

// Server runs one registrar replica and its endpoints.
type Server struct {
	reg     *Registrar
	grpc    *grpc.Server
	health  *health.Server
	http    *http.Server
	lis     net.Listener
	hlis    net.Listener
	stopTO  time.Duration
	mu      sync.Mutex
	cancel  context.CancelFunc
	killed  bool
	started bool
	page    *page // the web page (server_ui.go); nil when off
}

// NewServer creates the registrar and binds its listeners, so the addresses are
// known (and port 0 resolved) before Run.
func NewServer(cfg ServerConfig) (*Server, error) {
	if cfg.Metrics == nil {
		// The runtime's own series (heap, goroutine stacks, GC, file descriptors)
		// come with a registry the server makes: they are how an operator sees
		// what each watcher costs.
		cfg.Metrics = prometheus.NewRegistry()
		cfg.Metrics.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	cfg.Registrar.Metrics = cfg.Metrics
	reg, err := New(cfg.Registrar)
	if err != nil {
		return nil, err
	}
	s := &Server{reg: reg, stopTO: cfg.StopTimeout, health: health.NewServer()}
	if s.stopTO <= 0 {
		s.stopTO = 5 * time.Second
	}
	s.grpc = grpc.NewServer(append(ServerOptions(cfg.TLS, reg.log), cfg.GRPCOptions...)...)
	reg.RegisterService(s.grpc)
	reg.registerAether(s.grpc) // Aether's registrar API, same port and snapshot (aether_hooks.go)
	healthpb.RegisterHealthServer(s.grpc, s.health)
	reflection.Register(s.grpc)
	s.setServing(healthpb.HealthCheckResponse_NOT_SERVING)
	if s.lis, err = net.Listen("tcp", cfg.Listen); err != nil {
		return nil, fmt.Errorf("registrar: listen %s: %w", cfg.Listen, err)
	}
	if cfg.HealthListen != "" {
		if s.hlis, err = net.Listen("tcp", cfg.HealthListen); err != nil {
			s.lis.Close()
			return nil, fmt.Errorf("registrar: health listen %s: %w", cfg.HealthListen, err)
		}
		s.http = &http.Server{Handler: reg.healthHandler(cfg.Metrics, cfg.DebugMemory, s.newPage(cfg)), ReadHeaderTimeout: 10 * time.Second}
	}
	return s, nil
}

// ServerOptions are the gRPC server options a Registrar needs — its codec, which
// sends pre-encoded events as they are — plus keepalive settings, when tlsConf
// is set, TLS, with refused handshakes logged to log (nil: not logged), and
// while tracing is on, its stats handler. A
// grpc.Server that hosts a Registrar (RegisterService) must be made with them.
func ServerOptions(tlsConf *tls.Config, log *slog.Logger) []grpc.ServerOption {
	opts := []grpc.ServerOption{
		grpc.ForceServerCodecV2(newCodec()),
		// Agents ping to detect a dead registrar; allow it, and ping idle agents to
		// drop connections whose node vanished.
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 30 * time.Second, Timeout: 10 * time.Second}),
	}
	if tlsConf != nil {
		creds := credentials.NewTLS(tlsConf)
		if log != nil {
			creds = loggedCreds{TransportCredentials: creds, log: log}
		}
		opts = append(opts, grpc.Creds(creds))
	}
	// With tracing on, calls carry W3C trace context and get server spans
	// (tracing.go); the watch streams do not: their events carry their own.
	return append(opts, tracing.ServerOptions(untracedMethods...)...)
}

// loggedCreds logs every refused TLS handshake: the peer only sees a closed
// connection, so the registrar's log is where an operator learns why.
type loggedCreds struct {
	credentials.TransportCredentials
	log *slog.Logger
}

func (c loggedCreds) ServerHandshake(conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	out, info, err := c.TransportCredentials.ServerHandshake(conn)
	if err != nil {
		c.log.Warn("refused a connection: TLS handshake failed", "peer", conn.RemoteAddr().String(), "err", err)
	}
	return out, info, err
}

func (c loggedCreds) Clone() credentials.TransportCredentials {
	return loggedCreds{TransportCredentials: c.TransportCredentials.Clone(), log: c.log}
}

// Addr is the gRPC listen address.
func (s *Server) Addr() net.Addr { return s.lis.Addr() }

// HealthAddr is the HTTP listen address, nil when there is none.
func (s *Server) HealthAddr() net.Addr {
	if s.hlis == nil {
		return nil
	}
	return s.hlis.Addr()
}

// Registrar is the replica this server runs.
func (s *Server) Registrar() *Registrar { return s.reg }

// Run serves until ctx ends, then shuts down gracefully: health turns NOT_SERVING,
// watch streams end so agents move to another replica, new writes are refused, and
// the queued writes are persisted before Run returns.
func (s *Server) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s.mu.Lock()
	if s.started {
		s.mu.Unlock()
		return errors.New("registrar: server Run called twice")
	}
	s.started, s.cancel = true, cancel
	s.mu.Unlock()
	defer s.runPage(ctx)() // ctx has ended by the time Run returns

	regDone := make(chan error, 1)
	go func() { regDone <- s.reg.Run(ctx) }()
	serveDone := make(chan error, 2)
	go func() { serveDone <- s.grpc.Serve(s.lis) }()
	if s.http != nil {
		go func() { serveDone <- s.http.Serve(s.hlis) }()
	}
	go func() {
		select {
		case <-s.reg.Ready():
			s.setServing(healthpb.HealthCheckResponse_SERVING)
		case <-ctx.Done():
		}
	}()
	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-serveDone:
		// A listener failed under us: shut down rather than run deaf. Serve
		// returns nil when stopped, and ErrServerStopped when the stop came before
		// it started: before ctx ends, either is Kill's doing.
		if errors.Is(serveErr, grpc.ErrServerStopped) {
			serveErr = nil
		}
		if serveErr != nil {
			serveErr = fmt.Errorf("registrar: serving stopped: %w", serveErr)
		}
		cancel()
	}
	s.health.Shutdown()
	err := errors.Join(serveErr, <-regDone)
	s.stopGRPC()
	if s.http != nil {
		hctx, hcancel := context.WithTimeout(context.Background(), time.Second)
		_ = s.http.Shutdown(hctx)
		hcancel()
	}
	return err
}

// stopGRPC waits for open calls to end (the watch streams were ended by the
// registrar), unless the server was killed or the wait runs too long.
func (s *Server) stopGRPC() {
	s.mu.Lock()
	killed := s.killed
	s.mu.Unlock()
	if killed {
		s.grpc.Stop()
		return
	}
	grpcstop.Stop(s.grpc, s.stopTO)
}

// Kill stops the server as a crash would: connections drop at once and queued writes
// are not persisted. Run returns soon after. For tests of failover.
func (s *Server) Kill() {
	s.mu.Lock()
	s.killed = true
	cancel := s.cancel
	s.mu.Unlock()
	s.reg.Abort()
	s.grpc.Stop()
	if cancel != nil {
		cancel()
	}
}

func (s *Server) setServing(st healthpb.HealthCheckResponse_ServingStatus) {
	s.health.SetServingStatus("", st)
	s.health.SetServingStatus(registrarv1.Registrar_ServiceDesc.ServiceName, st)
}
