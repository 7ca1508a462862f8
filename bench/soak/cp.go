package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/switchboard-mesh/switchboard/controlplane/config"
	"github.com/switchboard-mesh/switchboard/controlplane/server"
	"github.com/switchboard-mesh/switchboard/controlplane/store"
	"github.com/switchboard-mesh/switchboard/dataplane"
	controlplanev1 "github.com/switchboard-mesh/switchboard/gen/switchboard/controlplane/v1"
	"github.com/switchboard-mesh/switchboard/internal/cpharness"
	"github.com/switchboard-mesh/switchboard/internal/freeport"
)

// fleet is the control-plane half of the soak: a control plane in API mode on SQLite
// (in this process; a restart stops it and starts a new one on the same addresses and
// database) and data-plane nodes — real dataplane.Controllers over memdp datapaths,
// wired to each other by the internal/cpharness fabric.
//
// The topology is a star made through the northbound API: segment "main" links group
// "hub" with every group ("*"). So the intended links are known without asking the
// control plane: one per (hub, edge group) pair while both groups have a node up.
type fleet struct {
	log    *slog.Logger
	cfg    *config.Config
	fabric *cpharness.Fabric
	nodes  []*cpharness.Node
	groups []string
	// announced is what each node announces (and re-announces after a restart).
	announced map[string][]dataplane.Name

	mu     sync.Mutex
	srv    *server.Server
	cancel context.CancelFunc
	done   chan error
	dup    *cpharness.Fabric // the duplicate of a node id, while one runs
	dupOf  string
}

const hubGroup = "hub"

func newFleet(dir string, edges, perGroup int, log *slog.Logger) (*fleet, error) {
	cfg, err := config.Parse(nil) // API mode: no topology section
	if err != nil {
		return nil, err
	}
	ports, err := freeport.On("127.0.0.1", 2)
	if err != nil {
		return nil, err
	}
	cfg.Southbound.Endpoint = "127.0.0.1:" + strconv.Itoa(ports[0])
	cfg.Northbound.Endpoint = "127.0.0.1:" + strconv.Itoa(ports[1])
	cfg.Database = config.Database{Type: config.DatabaseSQLite, Path: filepath.Join(dir, "cp.db")}
	// A sweep every 5 s: drift the control plane is not told about (the far end of a
	// crashed node's connection) is found by the sweep, and the final check allows
	// 10 s. Fast retries, as the e2e tests use.
	cfg.Reconciler = config.Reconciler{MaxRequeues: 15, BaseRetryDelay: 50 * time.Millisecond, ReconcilePeriod: 5 * time.Second, Workers: 4}
	f := &fleet{log: log, cfg: cfg, fabric: cpharness.NewFabric(), groups: []string{hubGroup}, announced: map[string][]dataplane.Name{}}
	for i := 1; i <= edges; i++ {
		f.groups = append(f.groups, fmt.Sprintf("edge%d", i))
	}
	// A few names, announced from several groups (some by the hub), so that routes
	// run both up and down the star.
	names := []dataplane.Name{dataplane.NewName("org", "soak", "alpha"), dataplane.NewName("org", "soak", "beta"), dataplane.NewName("org", "soak", "gamma")}
	for i, g := range f.groups {
		f.announced[g+"/n1"] = []dataplane.Name{names[i%len(names)]}
		if i%2 == 0 && perGroup > 1 {
			f.announced[g+"/n2"] = []dataplane.Name{names[(i+1)%len(names)]}
		}
	}
	if err := f.startCP(); err != nil {
		return nil, err
	}
	if err := f.makeTopology(); err != nil {
		f.close()
		return nil, err
	}
	for _, g := range f.groups {
		for i := 1; i <= perGroup; i++ {
			n, err := f.fabric.Start(f.nodeConfig(g, "n"+strconv.Itoa(i)))
			if err != nil {
				f.close()
				return nil, err
			}
			for _, name := range f.announced[n.ID()] {
				if err := n.Announce(name); err != nil {
					f.close()
					return nil, err
				}
			}
			f.nodes = append(f.nodes, n)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := f.fabric.WaitRegistered(ctx); err != nil {
		f.close()
		return nil, err
	}
	return f, nil
}

func (f *fleet) nodeConfig(group, id string) cpharness.NodeConfig {
	return cpharness.NodeConfig{Group: group, ID: id, Target: f.cfg.Southbound.Endpoint,
		Backoff: dataplane.Backoff{Base: 50 * time.Millisecond, Max: time.Second, HealthyAfter: 5 * time.Second},
		Logger:  f.log.With("node", group+"/"+id)}
}

// startCP starts a control plane on the fleet's addresses, retrying while the old
// one's sockets are released.
func (f *fleet) startCP() error {
	deadline := time.Now().Add(20 * time.Second)
	for {
		srv, err := server.New(context.Background(), server.Options{Config: f.cfg, Logger: f.log.With("component", "controlplane"), RequestTimeout: 10 * time.Second})
		if err == nil {
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- srv.Run(ctx) }()
			f.mu.Lock()
			f.srv, f.cancel, f.done = srv, cancel, done
			f.mu.Unlock()
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("control plane: %w", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// stopCP stops the control plane (its Run returns); the nodes keep running and
// reconnect to the next one.
func (f *fleet) stopCP() error {
	f.mu.Lock()
	cancel, done := f.cancel, f.done
	f.srv, f.cancel, f.done = nil, nil, nil
	f.mu.Unlock()
	if cancel == nil {
		return nil
	}
	cancel()
	select {
	case err := <-done:
		return err
	case <-time.After(30 * time.Second):
		return errors.New("control plane did not stop within 30s")
	}
}

func (f *fleet) server() *server.Server {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.srv
}

func (f *fleet) makeTopology() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := grpc.NewClient(f.cfg.Northbound.Endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	nb := controlplanev1.NewControlPlaneServiceClient(conn)
	if _, err := nb.AddSegment(ctx, &controlplanev1.SegmentRequest{Name: "main"}, grpc.WaitForReady(true)); err != nil {
		return fmt.Errorf("add segment: %w", err)
	}
	if _, err := nb.AddTopologyLink(ctx, &controlplanev1.TopologyLinkRequest{Segment: "main", GroupA: hubGroup, GroupB: "*"}); err != nil {
		return fmt.Errorf("add topology link: %w", err)
	}
	return nil
}

// startDuplicate starts a second controller with the id of node id, in a fabric of
// its own (its datapath reaches no one), as a stale copy of a node would.
func (f *fleet) startDuplicate(id string) error {
	n := f.fabric.Node(id)
	if n == nil {
		return fmt.Errorf("no node %s", id)
	}
	dup := cpharness.NewFabric()
	cfg := f.nodeConfig(n.Group(), id[len(n.Group())+1:])
	cfg.Logger = f.log.With("node", id, "duplicate", true)
	if _, err := dup.Start(cfg); err != nil {
		dup.Close()
		return err
	}
	f.mu.Lock()
	f.dup, f.dupOf = dup, id
	f.mu.Unlock()
	return nil
}

// stopDuplicate crashes the duplicate: its stream drops without a deregistration.
func (f *fleet) stopDuplicate() {
	f.mu.Lock()
	dup := f.dup
	f.dup, f.dupOf = nil, ""
	f.mu.Unlock()
	if dup != nil {
		dup.Close()
	}
}

func (f *fleet) close() {
	f.stopDuplicate()
	_ = f.stopCP()
	f.fabric.Close()
}

// checkCP compares every datapath with the intended links and routes, exactly once
// each. The intended links come from the topology (one per hub–edge pair), the
// routes from the control plane's store; every one of them must be installed on the
// right node exactly once, and nothing else may be installed anywhere.
func (f *fleet) checkCP(ctx context.Context) []string {
	srv := f.server()
	if srv == nil {
		return []string{"control plane is not running"}
	}
	st := srv.Store()
	links, err := st.ListLinks(ctx, store.LinkFilter{Deleted: store.IncludeDeleted})
	if err != nil {
		return []string{"list links: " + err.Error()}
	}
	routes, err := st.ListRoutes(ctx, store.RouteFilter{Deleted: store.IncludeDeleted})
	if err != nil {
		return []string{"list routes: " + err.Error()}
	}
	var errs []string
	bad := func(format string, args ...any) { errs = append(errs, fmt.Sprintf(format, args...)) }

	// The topology's links: every node is up at check time, so every hub–edge pair.
	pairs := map[string][]string{}
	live := map[string]store.Link{}
	for _, l := range links {
		if l.Deleted {
			bad("link %s %s -> %s is still marked deleted (every node is up)", l.ID, l.SourceNodeID, l.DestGroup)
			continue
		}
		live[l.ID] = l
		a, b := l.SourceGroup, l.DestGroup
		if b < a {
			a, b = b, a
		}
		pairs[a+"-"+b] = append(pairs[a+"-"+b], l.ID)
		if l.Status != store.LinkApplied || l.DestNodeID == "" {
			bad("link %s %s -> %s is %s, dest %q (%s)", l.ID, l.SourceNodeID, l.DestGroup, l.Status, l.DestNodeID, l.StatusMessage)
		}
	}
	for _, g := range f.groups[1:] {
		p := hubGroup + "-" + g
		if g < hubGroup {
			p = g + "-" + hubGroup
		}
		if n := len(pairs[p]); n != 1 {
			bad("groups %s: %d links, want exactly 1 (%v)", p, n, pairs[p])
		}
		delete(pairs, p)
	}
	for p, ids := range pairs {
		bad("groups %s: %d links the topology does not allow (%v)", p, len(ids), ids)
	}

	// What every datapath holds, counted.
	type connKey struct {
		node, link string
		inbound    bool
	}
	conns := map[connKey][]dataplane.ConnInfo{}
	type subKey struct{ node, name, link string }
	subs := map[subKey]int{}
	for _, n := range f.fabric.Nodes() {
		if !n.Up() {
			bad("node %s is down at check time", n.ID())
			continue
		}
		dp := n.Datapath()
		linkOf := map[dataplane.ConnID]string{}
		for _, c := range dp.Connections() {
			linkOf[c.ID] = c.LinkID
			k := connKey{n.ID(), c.LinkID, c.Inbound}
			conns[k] = append(conns[k], c)
		}
		for _, s := range dp.Subscriptions() {
			subs[subKey{n.ID(), s.Name.String(), linkOf[s.Conn]}]++
		}
	}
	for _, l := range live {
		out := conns[connKey{l.SourceNodeID, l.ID, false}]
		if len(out) != 1 || out[0].Endpoint != l.DestEndpoint {
			bad("link %s: source %s holds %d outgoing connections for it (want 1 to %s): %v", l.ID, l.SourceNodeID, len(out), l.DestEndpoint, out)
		}
		in := conns[connKey{l.DestNodeID, l.ID, true}]
		if len(in) != 1 || in[0].Endpoint != l.SourceNodeID {
			bad("link %s: destination %s holds %d inbound connections for it (want 1 from %s): %v", l.ID, l.DestNodeID, len(in), l.SourceNodeID, in)
		}
		delete(conns, connKey{l.SourceNodeID, l.ID, false})
		delete(conns, connKey{l.DestNodeID, l.ID, true})
	}
	for k, cs := range conns {
		bad("node %s holds %d stray %s connections labelled %q: %v", k.node, len(cs), dir(k.inbound), k.link, cs)
	}

	// Routes: templates are announcements, which the nodes make; expansions must each
	// be subscribed once on their node, over a live link of that node.
	wantTemplates := map[string]bool{}
	for id, names := range f.announced {
		for _, n := range names {
			wantTemplates[id+" "+n.String()] = true
		}
	}
	for _, r := range routes {
		if r.IsTemplate() {
			k := r.DestNodeID + " " + cpharness.DataplaneName(r.Name).String()
			if r.Deleted || !wantTemplates[k] {
				bad("wildcard template %d %s (deleted=%v) was not announced", r.ID, k, r.Deleted)
			}
			delete(wantTemplates, k)
			continue
		}
		name := cpharness.DataplaneName(r.Name).String()
		if r.Deleted || r.Status != store.RouteApplied {
			bad("route %d %s on %s over %s is %s, deleted=%v (%s)", r.ID, name, r.SourceNodeID, r.LinkID, r.Status, r.Deleted, r.StatusMessage)
		}
		l, ok := live[r.LinkID]
		if !ok || (l.SourceNodeID != r.SourceNodeID && l.DestNodeID != r.SourceNodeID) {
			bad("route %d %s on %s is over link %s, which is not a live link of that node", r.ID, name, r.SourceNodeID, r.LinkID)
		}
		k := subKey{r.SourceNodeID, name, r.LinkID}
		if n := subs[k]; n != 1 {
			bad("route %d %s: %s holds %d subscriptions over %s, want 1", r.ID, name, r.SourceNodeID, n, r.LinkID)
		}
		delete(subs, k)
	}
	for k := range wantTemplates {
		bad("announcement %s has no wildcard template", k)
	}
	for k, n := range subs {
		bad("node %s holds %d stray subscriptions to %s over %q", k.node, n, k.name, k.link)
	}
	sort.Strings(errs)
	return errs
}

func dir(inbound bool) string {
	if inbound {
		return "inbound"
	}
	return "outgoing"
}

// cpCounts summarises the store for the report.
func (f *fleet) cpCounts(ctx context.Context) string {
	srv := f.server()
	if srv == nil {
		return "control plane down"
	}
	links, err1 := srv.Store().ListLinks(ctx, store.LinkFilter{})
	routes, err2 := srv.Store().ListRoutes(ctx, store.RouteFilter{})
	if err := errors.Join(err1, err2); err != nil {
		return err.Error()
	}
	templates := 0
	for _, r := range routes {
		if r.IsTemplate() {
			templates++
		}
	}
	return fmt.Sprintf("%d nodes, %d links, %d routes, %d announcements", len(f.nodes), len(links), len(routes)-templates, templates)
}
