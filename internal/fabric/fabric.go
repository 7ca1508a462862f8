// Package fabric runs a control plane and reference data-plane nodes together on
// loopback: the harness of the node's end-to-end tests, of bench/dataplane and of
// `switchboard dev`. Each node listens on 127.0.0.1 with one port for links, peerings
// and clients (its external endpoint too), registers in a shared registry, and is
// driven by the control plane.
package fabric

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/switchboard-mesh/switchboard/controlplane/config"
	"github.com/switchboard-mesh/switchboard/controlplane/server"
	"github.com/switchboard-mesh/switchboard/dataplane"
	"github.com/switchboard-mesh/switchboard/dataplane/node"
	"github.com/switchboard-mesh/switchboard/registry"
	"github.com/switchboard-mesh/switchboard/registry/memory"
)

// Options configure a Fabric.
type Options struct {
	// Topology is the control plane's topology section in YAML ("" or "{}": API mode).
	Topology string
	// ControlPlane, when set, is used as the control plane's config instead of one
	// built from Topology (its endpoints are kept).
	ControlPlane *config.Config
	// Registry is shared by the nodes; default: an in-memory one the fabric closes.
	Registry registry.Registry
	// Southbound, when set, is an existing control plane's southbound address: the
	// fabric starts none of its own.
	Southbound string
	// Listen picks the address of a node (default 127.0.0.1:0).
	Listen func(group, id string) string
	// Node adjusts every node's config before it starts.
	Node   func(*node.Config)
	Logger *slog.Logger
}

// Fabric is a control plane and its nodes.
type Fabric struct {
	o      Options
	cp     *server.Server
	cpStop context.CancelFunc
	cpDone chan error
	ownReg bool

	mu    sync.Mutex
	nodes map[string]*Running
}

// Running is a node of the fabric.
type Running struct {
	*node.Node
	Group, NodeID string
	stop          context.CancelFunc
	done          chan error
}

// Start runs a control plane on 127.0.0.1 with fast retries.
func Start(ctx context.Context, o Options) (*Fabric, error) {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	f := &Fabric{o: o, nodes: map[string]*Running{}}
	if f.o.Registry == nil {
		f.o.Registry, f.ownReg = memory.New(), true
	}
	if o.Southbound != "" {
		return f, nil
	}
	cfg := o.ControlPlane
	if cfg == nil {
		var err error
		if cfg, err = config.Parse([]byte(topologyDoc(o.Topology))); err != nil {
			return nil, err
		}
		cfg.Northbound.Endpoint, cfg.Southbound.Endpoint = "127.0.0.1:0", "127.0.0.1:0"
		cfg.Reconciler = config.Reconciler{MaxRequeues: 15, BaseRetryDelay: 20 * time.Millisecond, ReconcilePeriod: 5 * time.Second, Workers: 4}
	}
	srv, err := server.New(ctx, server.Options{Config: cfg, Logger: o.Logger, RequestTimeout: 10 * time.Second})
	if err != nil {
		return nil, err
	}
	cctx, cancel := context.WithCancel(context.Background())
	f.cp, f.cpStop, f.cpDone = srv, cancel, make(chan error, 1)
	go func() { f.cpDone <- srv.Run(cctx) }()
	return f, nil
}

func topologyDoc(t string) string {
	if t == "" {
		return ""
	}
	return "topology:\n" + indent(t)
}

func indent(s string) string {
	out := "  "
	for i := range len(s) {
		out += string(s[i])
		if s[i] == '\n' && i+1 < len(s) {
			out += "  "
		}
	}
	return out
}

// ControlPlane is the running control plane (nil with Options.Southbound).
func (f *Fabric) ControlPlane() *server.Server { return f.cp }

// Registry is the registry the nodes share.
func (f *Fabric) Registry() registry.Registry { return f.o.Registry }

// StartNode starts node id of group and returns once it registered with the control
// plane (or ctx ends).
func (f *Fabric) StartNode(ctx context.Context, group, id string) (*Running, error) {
	addr := "127.0.0.1:0"
	if f.o.Listen != nil {
		addr = f.o.Listen(group, id)
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("node %s/%s: %w", group, id, err)
	}
	south := f.o.Southbound
	if south == "" {
		south = f.cp.SouthboundAddr()
	}
	cfg := node.Config{
		NodeID: id, Group: group, Listener: lis, ExternalEndpoint: lis.Addr().String(),
		ControlPlane: []string{south}, Registry: f.o.Registry,
		RegistrationTTL: 10 * time.Second, LinkGrace: 3 * time.Second,
		Backoff: dataplane.Backoff{Base: 20 * time.Millisecond, Max: 500 * time.Millisecond, HealthyAfter: time.Second},
		Logger:  f.o.Logger, // the node names itself on every line
	}
	if f.o.Node != nil {
		f.o.Node(&cfg)
	}
	n, err := node.New(cfg)
	if err != nil {
		_ = lis.Close()
		return nil, err
	}
	nctx, cancel := context.WithCancel(context.Background())
	r := &Running{Node: n, Group: group, NodeID: id, stop: cancel, done: make(chan error, 1)}
	f.mu.Lock()
	if _, dup := f.nodes[n.ID()]; dup {
		f.mu.Unlock()
		cancel()
		_ = lis.Close()
		return nil, fmt.Errorf("fabric: node %s is running", n.ID())
	}
	f.nodes[n.ID()] = r
	f.mu.Unlock()
	go func() { r.done <- n.Run(nctx) }()
	if err := n.Controller().WaitRegistered(ctx); err != nil {
		return r, fmt.Errorf("node %s did not register: %w", n.ID(), err)
	}
	return r, nil
}

// StartGroups starts perGroup nodes (n1, n2, ...) in each group.
func (f *Fabric) StartGroups(ctx context.Context, perGroup int, groups ...string) error {
	for _, g := range groups {
		for i := 1; i <= perGroup; i++ {
			if _, err := f.StartNode(ctx, g, fmt.Sprintf("n%d", i)); err != nil {
				return err
			}
		}
	}
	return nil
}

// Node returns the running node with effective id "{group}/{id}", or nil.
func (f *Fabric) Node(id string) *Running {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.nodes[id]
}

// Nodes returns the running nodes sorted by id.
func (f *Fabric) Nodes() []*Running {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]*Running, 0, len(f.nodes))
	for _, r := range f.nodes {
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b *Running) int { return cmp.Compare(a.ID(), b.ID()) })
	return out
}

// StopNode stops a node: gracefully (it deregisters), or with kill as a crash would.
func (f *Fabric) StopNode(id string, kill bool) error {
	f.mu.Lock()
	r := f.nodes[id]
	delete(f.nodes, id)
	f.mu.Unlock()
	if r == nil {
		return fmt.Errorf("fabric: no node %s", id)
	}
	if kill {
		r.Kill()
	}
	r.stop()
	select {
	case err := <-r.done:
		return err
	case <-time.After(30 * time.Second):
		return fmt.Errorf("fabric: node %s did not stop", id)
	}
}

// StopControlPlane stops the fabric's control plane; the nodes keep running (and keep
// reconnecting to it).
func (f *Fabric) StopControlPlane() {
	if f.cp == nil {
		return
	}
	f.cpStop()
	if err := <-f.cpDone; err != nil {
		f.o.Logger.Warn("control plane stopped with an error", "err", err)
	}
	f.cp = nil
}

// Close stops every node, then the control plane.
func (f *Fabric) Close() error {
	var errs []error
	kill := f.cp == nil && f.o.Southbound == "" // nobody to deregister from
	for _, r := range f.Nodes() {
		errs = append(errs, f.StopNode(r.ID(), kill))
	}
	if f.cp != nil {
		f.cpStop()
		errs = append(errs, <-f.cpDone)
	}
	if f.ownReg {
		errs = append(errs, f.o.Registry.Close())
	}
	return errors.Join(errs...)
}
