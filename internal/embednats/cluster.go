package embednats

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/switchboard-mesh/switchboard/internal/freeport"
)

// ClusterConfig describes a JetStream cluster of embedded servers on one host.
type ClusterConfig struct {
	// Name is the cluster name; default "switchboard".
	Name string
	// Size is the number of servers; default 3, the smallest cluster that survives
	// losing one.
	Size int
	// Dir holds one store directory per server (Dir/<server name>); required.
	Dir string
	// Host is where every server listens; default 127.0.0.1.
	Host string
	// Logger receives every server's log, tagged with the server name; nil discards.
	Logger *slog.Logger
}

// Cluster is a running set of embedded servers routed to each other. Servers can be
// stopped and restarted one at a time, keeping their addresses and data.
type Cluster struct {
	mu    sync.Mutex
	opts  []Options
	nodes []*Server // nil while stopped
}

// StartCluster starts cfg.Size servers and waits until JetStream has elected a meta
// leader that every server follows. The caller must call Shutdown.
func StartCluster(ctx context.Context, cfg ClusterConfig) (*Cluster, error) {
	if cfg.Dir == "" {
		return nil, errors.New("embedded nats cluster: Dir is required")
	}
	if cfg.Name == "" {
		cfg.Name = "switchboard"
	}
	if cfg.Size == 0 {
		cfg.Size = 3
	}
	if cfg.Host == "" {
		cfg.Host = "127.0.0.1"
	}
	// Every node is told every route up front, as nats-server's own tests do: JetStream
	// sizes its meta group from the configured routes, so a node that learnt its peers
	// only by gossip would start out expecting too small a cluster.
	ports, err := freeport.On(cfg.Host, 2*cfg.Size)
	if err != nil {
		return nil, fmt.Errorf("embedded nats cluster: %w", err)
	}
	routes := make([]string, cfg.Size)
	for i := range routes {
		routes[i] = net.JoinHostPort(cfg.Host, fmt.Sprint(ports[cfg.Size+i]))
	}
	c := &Cluster{opts: make([]Options, cfg.Size), nodes: make([]*Server, cfg.Size)}
	for i := range cfg.Size {
		name := fmt.Sprintf("%s-%d", cfg.Name, i+1)
		o := Options{
			Name: name, Host: cfg.Host, Port: ports[i], StoreDir: filepath.Join(cfg.Dir, name),
			Cluster: &ClusterOptions{Name: cfg.Name, Port: ports[cfg.Size+i], Routes: routes},
		}
		if cfg.Logger != nil {
			o.Logger = cfg.Logger.With("server", name)
		}
		c.opts[i] = o
	}
	for i := range c.opts {
		if err := c.Restart(ctx, i); err != nil {
			c.Shutdown()
			return nil, err
		}
	}
	if err := c.WaitReady(ctx); err != nil {
		c.Shutdown()
		return nil, err
	}
	return c, nil
}

// Size is the number of servers, running or stopped.
func (c *Cluster) Size() int { return len(c.opts) }

// Server returns server i, or nil while it is stopped.
func (c *Cluster) Server(i int) *Server {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nodes[i]
}

// ClientURL lists every server's client URL, comma-separated, as nats.Connect takes
// them: a client fails over between them.
func (c *Cluster) ClientURL() string {
	urls := make([]string, len(c.opts))
	for i, o := range c.opts {
		urls[i] = "nats://" + net.JoinHostPort(o.Host, fmt.Sprint(o.Port))
	}
	return strings.Join(urls, ",")
}

// Stop shuts server i down, keeping its data for Restart.
func (c *Cluster) Stop(i int) {
	c.mu.Lock()
	s := c.nodes[i]
	c.nodes[i] = nil
	c.mu.Unlock()
	if s != nil {
		s.Shutdown()
	}
}

// Restart starts server i again (or for the first time) on its old addresses and
// data. It does not wait for the server to catch up: use WaitReady for that.
func (c *Cluster) Restart(ctx context.Context, i int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.nodes[i] != nil {
		return fmt.Errorf("embedded nats cluster: server %s is already running", c.opts[i].Name)
	}
	s, err := Start(ctx, c.opts[i])
	if err != nil {
		return err
	}
	c.nodes[i] = s
	return nil
}

// WaitReady waits until some running server leads the JetStream meta group, every
// running server is caught up with it, and the leader has every running server's
// JetStream stats. Until the stats arrive the leader cannot place an asset on that
// server: a stream with as many replicas as servers fails with "no suitable peers
// for placement".
func (c *Cluster) WaitReady(ctx context.Context) error {
	for {
		if c.ready() {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("embedded nats cluster: JetStream not ready: %w", ctx.Err())
		case <-time.After(25 * time.Millisecond):
		}
	}
}

func (c *Cluster) ready() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	var leader *Server
	for _, s := range c.nodes {
		if s == nil {
			continue
		}
		if !s.JetStreamReady() {
			return false
		}
		if s.isMetaLeader() {
			leader = s
		}
	}
	if leader == nil {
		return false
	}
	placeable := make(map[string]bool)
	for _, name := range leader.ns.JetStreamClusterPeers() {
		placeable[name] = true
	}
	for _, s := range c.nodes {
		if s != nil && !placeable[s.Name()] {
			return false
		}
	}
	return true
}

// Shutdown stops every running server. It is idempotent.
func (c *Cluster) Shutdown() {
	for i := range c.opts {
		c.Stop(i)
	}
}
