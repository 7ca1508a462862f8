package reconcile_test

import (
	"context"
	"log/slog"
	"net"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/switchboard-mesh/switchboard/controlplane"
	"github.com/switchboard-mesh/switchboard/controlplane/config"
	"github.com/switchboard-mesh/switchboard/controlplane/nodestream"
	"github.com/switchboard-mesh/switchboard/controlplane/reconcile"
	"github.com/switchboard-mesh/switchboard/controlplane/southbound"
	"github.com/switchboard-mesh/switchboard/controlplane/store"
	"github.com/switchboard-mesh/switchboard/controlplane/store/memory"
	"github.com/switchboard-mesh/switchboard/controlplane/store/sqlite"
	"github.com/switchboard-mesh/switchboard/dataplane"
	controllerv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/controller/v1"
	"github.com/switchboard-mesh/switchboard/internal/cpharness"
)

// rig is a control plane without its work queues: the real service, store, node
// streams and southbound service on loopback gRPC, with real data-plane controllers
// over memdp, and the two reconcilers a test calls directly, one Sync at a time.
type rig struct {
	t   *testing.T
	ctx context.Context
	// st is the store of the service and the reconcilers; hooks.Store is the store
	// under it, where a hook writes what "the core" does at an awkward moment.
	st     store.Store
	hooks  *hookStore
	svc    *controlplane.Service
	nodes  *countingNodes
	f      *cpharness.Fabric
	links  *reconcile.Links
	routes *reconcile.Routes

	mu          sync.Mutex
	linkPokes   []string
	routePokes  []string
	cloud, edge *cpharness.Node
	// lenient lets datapaths hold connections the store does not know.
	lenient bool
	// warnings are the reconcilers' log records at warn and above.
	warnings *recordLog
}

var svcName = dataplane.NewName("org", "ns", "svc")

// forStores runs fn on both stores.
func forStores(t *testing.T, fn func(t *testing.T, db string)) {
	for _, db := range []string{config.DatabaseInMemory, config.DatabaseSQLite} {
		t.Run(db, func(t *testing.T) { fn(t, db) })
	}
}

// newRig starts cloud/n1 and edge/n1 in a star, with edge/n1 announcing svcName.
// Only cloud/n1 has an external endpoint, so the one link goes from edge/n1 to
// cloud/n1, and the one route (toward the announcer) sits on cloud/n1, the link's
// destination. opts adjust both nodes' configurations.
func newRig(t *testing.T, db string, orphans bool, opts ...func(*cpharness.NodeConfig)) *rig {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	r := &rig{t: t, ctx: ctx, warnings: &recordLog{}}
	logger := slog.New(r.warnings)
	var base store.Store = memory.New()
	if db == config.DatabaseSQLite {
		st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "cp.db"))
		if err != nil {
			t.Fatal(err)
		}
		base = st
	}
	r.hooks = &hookStore{Store: base}
	r.st = r.hooks
	topo, err := config.Parse([]byte("topology:\n  links:\n    - group: cloud\n      neighbors: ['*']\n"))
	if err != nil {
		t.Fatal(err)
	}
	if r.svc, err = controlplane.New(ctx, controlplane.Options{Store: r.st, Topology: topo.Topology}); err != nil {
		t.Fatal(err)
	}
	streams := nodestream.New(10 * time.Second)
	r.nodes = &countingNodes{Nodes: streams, commands: map[string]int{}, requests: map[string]int{}}
	r.links = reconcile.NewLinks(reconcile.LinkOptions{Store: r.st, Nodes: r.nodes, OrphanDetection: orphans, Logger: logger,
		EnqueueRoutes: func(ids ...string) { r.mu.Lock(); r.routePokes = append(r.routePokes, ids...); r.mu.Unlock() }})
	r.routes = reconcile.NewRoutes(reconcile.RouteOptions{Store: r.st, Nodes: r.nodes, Logger: logger,
		EnqueueLinks: func(ids ...string) { r.mu.Lock(); r.linkPokes = append(r.linkPokes, ids...); r.mu.Unlock() }})
	addr := r.serve(streams)
	r.f = cpharness.NewFabric()
	t.Cleanup(r.f.Close)
	for _, g := range []string{"cloud", "edge"} {
		cfg := cpharness.NodeConfig{Group: g, ID: "n1", Target: addr, NoExternal: g == "edge"}
		for _, o := range opts {
			o(&cfg)
		}
		n, err := r.f.Start(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if g == "cloud" {
			r.cloud = n
		} else {
			r.edge = n
		}
	}
	if err := r.f.WaitRegistered(ctx); err != nil {
		t.Fatal(err)
	}
	if err := r.edge.Announce(svcName); err != nil {
		t.Fatal(err)
	}
	return r
}

// serve runs the southbound service; reconciliation is left to the test.
func (r *rig) serve(streams *nodestream.Handler) string {
	sb := southbound.New(southbound.Options{Service: r.svc, Streams: streams})
	gs := grpc.NewServer(grpc.WaitForHandlers(true))
	sb.Register(gs)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		r.t.Fatal(err)
	}
	go func() { _ = gs.Serve(lis) }()
	r.t.Cleanup(func() { sb.Closing(); gs.Stop(); _ = r.st.Close() })
	return lis.Addr().String()
}

// converge drives both reconcilers over both nodes until the store and the
// datapaths agree (claims and announcements arrive on their own).
func (r *rig) converge() {
	r.t.Helper()
	err := cpharness.Eventually(r.ctx, func() error {
		for _, n := range []*cpharness.Node{r.cloud, r.edge} {
			_ = r.links.Sync(r.ctx, n.ID())
			_ = r.routes.Sync(r.ctx, n.ID())
		}
		if rs := r.routesAll(); len(rs) == 0 {
			return store.NotFound("expanded route", "")
		}
		return cpharness.Converged(r.ctx, r.st, r.f, !r.lenient)
	})
	if err != nil {
		r.t.Fatalf("not converged: %v", err)
	}
	r.resetCounts()
}

func (r *rig) resetCounts() {
	r.mu.Lock()
	r.linkPokes, r.routePokes = nil, nil
	r.mu.Unlock()
	r.nodes.reset()
}

func (r *rig) link() store.Link {
	r.t.Helper()
	ls, err := r.st.ListLinks(r.ctx, store.LinkFilter{Deleted: store.IncludeDeleted})
	if err != nil || len(ls) != 1 {
		r.t.Fatalf("links: %v, %v", ls, err)
	}
	return ls[0]
}

func (r *rig) routesAll() []store.Route {
	rs, _ := r.st.ListRoutes(r.ctx, store.RouteFilter{Deleted: store.IncludeDeleted})
	return slices.DeleteFunc(rs, store.Route.IsTemplate)
}

// route returns the one expanded route (on cloud/n1, toward the announcer).
func (r *rig) route() store.Route {
	r.t.Helper()
	rs := r.routesAll()
	if len(rs) != 1 {
		r.t.Fatalf("routes: %v", rs)
	}
	return rs[0]
}

func (r *rig) node(id string) *cpharness.Node { return r.f.Node(id) }

func (r *rig) pokes() (links, routes []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.linkPokes), slices.Clone(r.routePokes)
}

// ops returns the node's datapath operation log.
func ops(n *cpharness.Node) []string { return n.Datapath().Ops() }

// countingNodes counts the requests the reconcilers make, and can act just before a
// ConfigCommand leaves (to stage races after the pre-flight queries).
type countingNodes struct {
	reconcile.Nodes
	mu       sync.Mutex
	requests map[string]int
	commands map[string]int
	before   func(nodeID string, cmd *controllerv1.ConfigCommand)
}

func (c *countingNodes) Request(ctx context.Context, nodeID string, msg *controllerv1.ControlMessage) (*controllerv1.ControlMessage, error) {
	c.mu.Lock()
	c.requests[nodeID]++
	cmd := msg.GetConfigCommand()
	before := c.before
	if cmd != nil {
		c.commands[nodeID]++
	}
	c.mu.Unlock()
	if cmd != nil && before != nil {
		before(nodeID, cmd)
	}
	return c.Nodes.Request(ctx, nodeID, msg)
}

func (c *countingNodes) counts(nodeID string) (requests, commands int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.requests[nodeID], c.commands[nodeID]
}

func (c *countingNodes) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.requests, c.commands, c.before = map[string]int{}, map[string]int{}, nil
}

func (c *countingNodes) onCommand(fn func(string, *controllerv1.ConfigCommand)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.before = fn
}

type dataplaneConn = dataplane.ConnInfo

// e2eConverged checks everything the store wants is in place (extra connections
// allowed).
func e2eConverged(r *rig) error { return cpharness.Converged(r.ctx, r.st, r.f, false) }

// hookStore runs the test's hooks just before each link or route update reaches the
// store, to stage a core decision between a reconciler's read and its write.
type hookStore struct {
	store.Store
	mu    sync.Mutex
	link  func(id string, u store.LinkUpdate)
	route func(id int64, u store.RouteUpdate)
	// refuseRoute, when it returns an error, has UpdateRoute fail with it and write
	// nothing.
	refuseRoute func(id int64, u store.RouteUpdate) error
}

func (h *hookStore) UpdateLink(ctx context.Context, id string, u store.LinkUpdate) (store.Link, error) {
	h.mu.Lock()
	fn := h.link
	h.mu.Unlock()
	if fn != nil {
		fn(id, u)
	}
	return h.Store.UpdateLink(ctx, id, u)
}

func (h *hookStore) UpdateRoute(ctx context.Context, id int64, u store.RouteUpdate) (store.Route, error) {
	h.mu.Lock()
	fn, refuse := h.route, h.refuseRoute
	h.mu.Unlock()
	if fn != nil {
		fn(id, u)
	}
	if refuse != nil {
		if err := refuse(id, u); err != nil {
			return store.Route{}, err
		}
	}
	return h.Store.UpdateRoute(ctx, id, u)
}

func (h *hookStore) onRouteRefuse(fn func(int64, store.RouteUpdate) error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.refuseRoute = fn
}

func (h *hookStore) onLink(fn func(string, store.LinkUpdate)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.link = fn
}

func (h *hookStore) onRoute(fn func(int64, store.RouteUpdate)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.route = fn
}

// conditional reports whether u is a reconciler's conditional write to status st.
func conditional[S comparable](ifVersion *int64, status *S, st S) bool {
	return ifVersion != nil && status != nil && *status == st
}

// recordLog is a slog.Handler keeping the messages of records at warn and above.
type recordLog struct {
	mu   sync.Mutex
	msgs []string
}

func (l *recordLog) Enabled(_ context.Context, lvl slog.Level) bool { return lvl >= slog.LevelWarn }

func (l *recordLog) Handle(_ context.Context, rec slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.msgs = append(l.msgs, rec.Message)
	return nil
}

func (l *recordLog) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *recordLog) WithGroup(string) slog.Handler      { return l }

func (l *recordLog) messages() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.msgs)
}
