package embednats

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// Options configure one embedded server.
type Options struct {
	// Name is the server name, unique within a cluster; default "switchboard".
	Name string
	// Host is the client listen address; default 127.0.0.1.
	Host string
	// Port is the client port; 0 picks a free one (see Server.Options for the result).
	Port int
	// StoreDir is where JetStream keeps its data; required. Reusing a directory is how
	// a restarted server gets its streams back.
	StoreDir string
	// MaxMemory and MaxStore cap JetStream's memory and disk use in bytes; 0 leaves
	// nats-server's defaults (a share of the machine).
	MaxMemory, MaxStore int64
	// Cluster, when set, makes the server one node of a JetStream cluster.
	Cluster *ClusterOptions
	// Logger receives the server's log; nil discards it. Debug and trace output is
	// produced only when the logger has those levels enabled.
	Logger *slog.Logger
	// StartTimeout bounds how long Start waits for the server to accept clients;
	// default 10 seconds. The context given to Start bounds it too.
	StartTimeout time.Duration
}

// ClusterOptions make a server a cluster node.
type ClusterOptions struct {
	// Name is the cluster name, the same on every node; required.
	Name string
	// Host is the route listen address; default Options.Host.
	Host string
	// Port is the route port; 0 picks a free one.
	Port int
	// Routes lists the route addresses (host:port or nats-route://host:port) of the
	// cluster's nodes; this node's own address may be included.
	Routes []string
	// NoAdvertise keeps the server from telling clients the other nodes' client
	// addresses: a client then reconnects only to the URLs it was given (a proxy in
	// front of each node, say).
	NoAdvertise bool
}

// Server is a running embedded nats-server.
type Server struct {
	ns   *server.Server
	opts Options
}

// Start starts a server with JetStream enabled and returns once it accepts clients.
// The caller owns the server and must call Shutdown.
func Start(ctx context.Context, o Options) (*Server, error) {
	o = o.withDefaults()
	sopts, err := o.serverOptions()
	if err != nil {
		return nil, err
	}
	ns, err := server.NewServer(sopts)
	if err != nil {
		return nil, fmt.Errorf("embedded nats-server %s: %w", o.Name, err)
	}
	if o.Logger != nil {
		ctx := context.Background()
		ns.SetLoggerV2(slogAdapter{o.Logger}, o.Logger.Enabled(ctx, slog.LevelDebug), o.Logger.Enabled(ctx, slog.LevelDebug-4), false)
	}
	ns.Start()
	if err := waitReady(ctx, ns, o.StartTimeout); err != nil {
		ns.Shutdown()
		ns.WaitForShutdown()
		return nil, fmt.Errorf("embedded nats-server %s: %w", o.Name, err)
	}
	s := &Server{ns: ns, opts: o}
	s.opts.Port = ns.Addr().(*net.TCPAddr).Port
	if o.Cluster != nil {
		c := *o.Cluster
		c.Port = ns.ClusterAddr().Port
		s.opts.Cluster = &c
	}
	return s, nil
}

func (o Options) withDefaults() Options {
	if o.Name == "" {
		o.Name = "switchboard"
	}
	if o.Host == "" {
		o.Host = "127.0.0.1"
	}
	if o.StartTimeout <= 0 {
		o.StartTimeout = 10 * time.Second
	}
	return o
}

func (o Options) serverOptions() (*server.Options, error) {
	if o.StoreDir == "" {
		return nil, errors.New("embedded nats-server: StoreDir is required (JetStream keeps its data there)")
	}
	if o.Port < 0 || o.Port > 65535 {
		return nil, fmt.Errorf("embedded nats-server: port %d: must be 0..65535 (0 picks a free port)", o.Port)
	}
	so := &server.Options{
		ServerName:         o.Name,
		Host:               o.Host,
		Port:               portOrRandom(o.Port),
		JetStream:          true,
		StoreDir:           o.StoreDir,
		JetStreamMaxMemory: o.MaxMemory,
		JetStreamMaxStore:  o.MaxStore,
		NoSigs:             true,
		NoLog:              o.Logger == nil,
	}
	if c := o.Cluster; c != nil {
		if c.Name == "" {
			return nil, errors.New("embedded nats-server: Cluster.Name is required")
		}
		host := c.Host
		if host == "" {
			host = o.Host
		}
		so.Cluster = server.ClusterOpts{Name: c.Name, Host: host, Port: portOrRandom(c.Port), NoAdvertise: c.NoAdvertise}
		for _, r := range c.Routes {
			u, err := routeURL(r)
			if err != nil {
				return nil, err
			}
			so.Routes = append(so.Routes, u)
		}
	}
	return so, nil
}

// portOrRandom maps our "0 picks a free port" to nats-server's spelling of it; its 0
// means the default port 4222.
func portOrRandom(p int) int {
	if p == 0 {
		return server.RANDOM_PORT
	}
	return p
}

func routeURL(s string) (*url.URL, error) {
	if !strings.Contains(s, "://") {
		s = "nats-route://" + s
	}
	u, err := url.Parse(s)
	if err != nil || u.Hostname() == "" || u.Port() == "" {
		return nil, fmt.Errorf("embedded nats-server: route %q: want host:port or nats-route://host:port", s)
	}
	return u, nil
}

// waitReady polls in short steps so that ctx cancellation is honoured while the
// server starts.
func waitReady(ctx context.Context, ns *server.Server, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for !ns.ReadyForConnections(50 * time.Millisecond) {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("not ready: %w", err)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not accepting clients after %s", timeout)
		}
	}
	if !ns.JetStreamEnabled() {
		return errors.New("JetStream did not start (see the server log)")
	}
	return nil
}

// ClientURL is the nats:// URL clients connect to.
func (s *Server) ClientURL() string { return s.ns.ClientURL() }

// ClusterURL is the nats-route:// URL other nodes route to; empty when not clustered.
func (s *Server) ClusterURL() string {
	a := s.ns.ClusterAddr()
	if a == nil {
		return ""
	}
	return "nats-route://" + net.JoinHostPort(s.opts.clusterHost(), strconv.Itoa(a.Port))
}

func (o Options) clusterHost() string {
	if o.Cluster != nil && o.Cluster.Host != "" {
		return o.Cluster.Host
	}
	return o.Host
}

// Name is the server name.
func (s *Server) Name() string { return s.opts.Name }

// Options returns the options the server runs with, ports filled in: starting a new
// server with them after Shutdown brings the same node back on the same addresses.
func (s *Server) Options() Options {
	o := s.opts
	if o.Cluster != nil {
		c := *o.Cluster
		c.Routes = append([]string(nil), c.Routes...)
		o.Cluster = &c
	}
	return o
}

// JetStreamReady reports whether the server's JetStream can serve requests: always
// once started when standalone; when clustered, once it sees a meta leader and is
// caught up with it.
func (s *Server) JetStreamReady() bool {
	return s.ns.JetStreamEnabled() && s.ns.JetStreamIsCurrent()
}

// isMetaLeader reports whether this node leads the JetStream meta group.
func (s *Server) isMetaLeader() bool { return s.ns.JetStreamIsLeader() }

// Shutdown stops the server and waits until it has stopped. It is idempotent.
func (s *Server) Shutdown() {
	s.ns.Shutdown()
	s.ns.WaitForShutdown()
}
