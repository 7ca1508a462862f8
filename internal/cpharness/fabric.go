package cpharness

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/switchboard-mesh/switchboard/dataplane"
	"github.com/switchboard-mesh/switchboard/nodeauth"
)

// Fabric is a set of in-process data-plane nodes and the network between their
// datapaths. The zero value is not usable; call NewFabric.
type Fabric struct {
	ctx    context.Context
	cancel context.CancelFunc

	mu    sync.Mutex
	nodes map[string]*Node // by effective id
	byExt map[string]*Node // external endpoint -> node that is up
}

// NewFabric returns an empty fabric; Close stops every node in it.
func NewFabric() *Fabric {
	ctx, cancel := context.WithCancel(context.Background())
	return &Fabric{ctx: ctx, cancel: cancel, nodes: map[string]*Node{}, byExt: map[string]*Node{}}
}

// NodeConfig describes a node to start.
type NodeConfig struct {
	Group, ID string
	// NoExternal leaves the node without an external endpoint (it can only dial).
	NoExternal bool
	// Target is the CP's southbound address; Conn, when set, is used instead.
	Target string
	// Targets are several control-plane replicas (dataplane.Config.Targets).
	Targets     []string
	Conn        grpc.ClientConnInterface
	DialOptions []grpc.DialOption // default: plaintext
	Tokens      nodeauth.TokenProvider
	// Backoff between sessions; short defaults suit tests.
	Backoff    dataplane.Backoff
	AckTimeout time.Duration
	Logger     *slog.Logger
	// NoOpLog keeps the node's datapath from logging its operations (benchmarks).
	NoOpLog bool
}

// Start adds a node, starts its controller and returns without waiting for it to
// register.
func (f *Fabric) Start(cfg NodeConfig) (*Node, error) {
	if cfg.Backoff.Base == 0 {
		cfg.Backoff = dataplane.Backoff{Base: 20 * time.Millisecond, Max: 200 * time.Millisecond, HealthyAfter: time.Second}
	}
	if cfg.Conn == nil && cfg.DialOptions == nil {
		cfg.DialOptions = []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	}
	n := &Node{f: f, cfg: cfg, id: cfg.Group + "/" + cfg.ID, announced: map[dataplane.Name]bool{}, dropBeforeSub: map[string]bool{}}
	if !cfg.NoExternal {
		n.external = "ext-" + cfg.Group + "-" + cfg.ID + ":46357"
	}
	f.mu.Lock()
	if _, dup := f.nodes[n.id]; dup {
		f.mu.Unlock()
		return nil, fmt.Errorf("e2e: node %s exists", n.id)
	}
	f.nodes[n.id] = n
	f.mu.Unlock()
	return n, n.boot()
}

// Node returns the node with effective id "{group}/{id}", or nil.
func (f *Fabric) Node(id string) *Node {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.nodes[id]
}

// Nodes returns every node, sorted by id.
func (f *Fabric) Nodes() []*Node {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]*Node, 0, len(f.nodes))
	for _, n := range f.nodes {
		out = append(out, n)
	}
	slices.SortFunc(out, func(a, b *Node) int { return cmp.Compare(a.id, b.id) })
	return out
}

// WaitRegistered waits until every node that is up has a registered session.
func (f *Fabric) WaitRegistered(ctx context.Context) error {
	for _, n := range f.Nodes() {
		if c := n.Controller(); c != nil {
			if err := c.WaitRegistered(ctx); err != nil {
				return fmt.Errorf("node %s not registered: %w", n.id, err)
			}
		}
	}
	return nil
}

// Close stops every controller (their streams drop) and releases the datapaths.
func (f *Fabric) Close() {
	f.cancel()
	for _, n := range f.Nodes() {
		n.stopController()
		n.mu.Lock()
		dp := n.dp
		n.mu.Unlock()
		if dp != nil {
			dp.Close()
		}
	}
}

func (f *Fabric) listen(n *Node) {
	if n.external == "" {
		return
	}
	f.mu.Lock()
	f.byExt[n.external] = n
	f.mu.Unlock()
}

func (f *Fabric) unlisten(n *Node) {
	f.mu.Lock()
	if f.byExt[n.external] == n {
		delete(f.byExt, n.external)
	}
	f.mu.Unlock()
}

func (f *Fabric) listener(endpoint string) *Node {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.byExt[endpoint]
}

// Eventually polls check every 20 ms until it returns nil or ctx ends; then it returns
// the last error.
func Eventually(ctx context.Context, check func() error) error {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		err := check()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return errors.Join(err, ctx.Err())
		case <-t.C:
		}
	}
}
