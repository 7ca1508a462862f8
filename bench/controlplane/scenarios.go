package main

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/switchboard-mesh/switchboard/controlplane/config"
	"github.com/switchboard-mesh/switchboard/controlplane/server"
	"github.com/switchboard-mesh/switchboard/controlplane/store"
	"github.com/switchboard-mesh/switchboard/controlplane/store/memory"
	"github.com/switchboard-mesh/switchboard/dataplane"
	controllerv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/controller/v1"
	"github.com/switchboard-mesh/switchboard/internal/cpharness"
)

// The scenarios below start a fleet, let its links converge, and then time one event
// until every link and route is Applied again:
//
//   - names: star topology, the first node of every group announces a name of its own
//     (groups × (groups-1) routes);
//   - mesh: every group linked to every other (`* ↔ *`), every node announces one shared
//     name;
//   - crash: after mesh, one node of every group (10% at 10 nodes per group) crashes
//     and reconnects at once.

// measure is one scenario's outcome.
type measure struct {
	scenario     string
	store        string
	nodes        int
	groups       int
	converge     time.Duration // from the event until every link and route is Applied
	lastStored   time.Duration // from the event until the CP stored the last announcement
	cpu          time.Duration // user+system CPU of the whole process (CP and DP fleet)
	commands     int64         // ConfigCommands the CP sent to nodes
	heapCP       uint64        // CP heap after convergence: live heap minus live heap once it stopped
	links        int
	routes       int
	load         string
	goal         time.Duration
	verified     error
	failed       error
	fleetStartup time.Duration // start until the links converged (not timed against a goal)
}

// commandCounter counts ConfigCommands arriving at the nodes, at the gRPC client.
type commandCounter struct{ n atomic.Int64 }

func (c *commandCounter) interceptor() grpc.StreamClientInterceptor {
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		s, err := streamer(ctx, desc, cc, method, opts...)
		if err != nil {
			return nil, err
		}
		return &countingStream{ClientStream: s, c: c}, nil
	}
}

type countingStream struct {
	grpc.ClientStream
	c *commandCounter
}

func (s *countingStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if msg, ok := m.(*controllerv1.ControlMessage); ok && err == nil && msg.GetConfigCommand() != nil {
		s.c.n.Add(1)
	}
	return err
}

// cpuTime is the process's user+system CPU so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// loadAvg is the one-minute load average: the machine is shared, and a busy neighbour
// shows in every figure.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	return strings.Fields(string(b))[0]
}

func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// scannableHeap is the heap the collector has to scan, as of the last collection:
// pointer-free objects (a route record, a slice of ids) are left out of it.
func scannableHeap() uint64 {
	sample := []metrics.Sample{{Name: "/gc/scan/heap:bytes"}}
	metrics.Read(sample)
	if sample[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return sample[0].Value.Uint64()
}

// rig is one control plane with its fleet.
type rig struct {
	c         options
	storeKind string
	topology  string
	dir       string
	srv       *server.Server
	stop      func()
	fabric    *cpharness.Fabric
	nodes     []*cpharness.Node
	cfg       *config.Config // the control plane's, for a restart
	conns     []*grpc.ClientConn
	counter   *commandCounter
	// db reads the SQLite store's file on a connection of its own: counting rows
	// in SQL costs a fraction of listing them through the store, so watching ten
	// thousand routes converge does not slow them down.
	db *sql.DB
}

func startRig(ctx context.Context, c options, storeKind, topology string) (*rig, error) {
	dir, err := os.MkdirTemp("", "switchboard-cp-bench-")
	if err != nil {
		return nil, err
	}
	r := &rig{c: c, storeKind: storeKind, topology: topology, dir: dir, counter: &commandCounter{}}
	file := "topology:\n  links:\n    - group: '" + topology + "'\n      neighbors: ['*']\n"
	if topology == "" { // API mode: the segment is made through the service
		file = ""
	}
	cfg, err := config.Parse([]byte(file))
	if err != nil {
		return nil, err
	}
	cfg.Northbound.Endpoint, cfg.Southbound.Endpoint = "127.0.0.1:0", "127.0.0.1:0"
	cfg.Reconciler.Workers, cfg.Reconciler.BaseRetryDelay = c.workers, c.baseDelay
	cfg.Database = config.Database{Type: config.DatabaseInMemory}
	if storeKind == "sqlite" {
		cfg.Database = config.Database{Type: config.DatabaseSQLite, Path: dir + "/cp.db"}
	}
	r.cfg = cfg
	if err := r.startCP(ctx); err != nil {
		return nil, err
	}
	srv := r.srv
	if storeKind == "sqlite" {
		if r.db, err = sql.Open("sqlite", dir+"/cp.db?_pragma=busy_timeout(10000)&mode=ro"); err != nil {
			return nil, err
		}
	}
	opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithStreamInterceptor(r.counter.interceptor())}
	for range c.conns {
		cc, err := grpc.NewClient(srv.SouthboundAddr(), opts...)
		if err != nil {
			r.close()
			return nil, err
		}
		r.conns = append(r.conns, cc)
	}
	r.fabric = cpharness.NewFabric()
	for i := range c.nodes {
		nc := cpharness.NodeConfig{Group: groupName(i % c.groups), ID: fmt.Sprintf("n%03d", i/c.groups), Target: srv.SouthboundAddr(),
			Backoff: dataplane.Backoff{Base: 100 * time.Millisecond, Max: time.Second, HealthyAfter: 10 * time.Second}, NoOpLog: true}
		if len(r.conns) > 0 {
			nc.Conn = r.conns[i%len(r.conns)]
		} else {
			nc.DialOptions = opts
		}
		n, err := r.fabric.Start(nc)
		if err != nil {
			r.close()
			return nil, err
		}
		r.nodes = append(r.nodes, n)
	}
	if err := r.fabric.WaitRegistered(ctx); err != nil {
		r.close()
		return nil, err
	}
	return r, nil
}

// startCP starts a control plane on the rig's config (after a restart, on the same
// southbound address and database).
func (r *rig) startCP(ctx context.Context) error {
	srv, err := server.New(ctx, server.Options{Config: r.cfg, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return err
	}
	sctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(sctx) }()
	var once sync.Once
	r.srv = srv
	r.stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				fmt.Fprintln(os.Stderr, "control plane:", err)
			}
		})
	}
	return nil
}

// close stops the control plane before the fleet, so that the streams ending is not
// taken for a thousand crashes.
func (r *rig) close() {
	if r.stop != nil {
		r.stop()
	}
	if r.fabric != nil {
		r.fabric.Close()
	}
	for _, cc := range r.conns {
		_ = cc.Close()
	}
	if r.db != nil {
		_ = r.db.Close()
	}
	_ = os.RemoveAll(r.dir)
}

// stopCP stops the control plane alone and returns how much live heap that freed.
func (r *rig) stopCP(before uint64) uint64 {
	r.stop()
	r.srv = nil
	after := liveHeap()
	if after > before {
		return 0
	}
	return before - after
}

func (r *rig) wantLinks() int {
	if r.topology == "*" {
		return r.c.groups * (r.c.groups - 1) / 2
	}
	return r.c.groups - 1
}

// counts is what the store holds right now.
type counts struct {
	links, routes, templates int
	settled                  bool // every link Applied and claimed, every route Applied, nothing deleted
}

func (r *rig) count(ctx context.Context) (counts, error) {
	if r.db != nil {
		return r.countSQL(ctx)
	}
	st := r.srv.Store()
	if t, ok := st.(tallier); ok {
		lt, rt := t.Tally()
		return counts{links: lt.Links, routes: rt.Expansions, templates: rt.Templates,
			settled: lt.Links == lt.LinksAppliedClaimed && rt.Expansions == rt.ExpansionsApplied}, nil
	}
	ls, err := st.ListLinks(ctx, store.LinkFilter{Deleted: store.IncludeDeleted})
	if err != nil {
		return counts{}, err
	}
	rs, err := st.ListRoutes(ctx, store.RouteFilter{Deleted: store.IncludeDeleted})
	if err != nil {
		return counts{}, err
	}
	c := counts{settled: true}
	for _, l := range ls {
		c.links++
		if l.Status != store.LinkApplied || l.DestNodeID == "" || l.Deleted {
			c.settled = false
		}
	}
	for _, rt := range rs {
		if rt.IsTemplate() {
			if !rt.Deleted {
				c.templates++
			}
			continue
		}
		c.routes++
		if rt.Status != store.RouteApplied || rt.Deleted {
			c.settled = false
		}
	}
	return c, nil
}

// waitFor polls the store until want holds, with a pause that grows with the cost of
// a poll (listing 10,000 routes from SQLite is not free) so that watching does not
// slow down what it watches by more than a ninth. onTemplates is called once when the
// store holds templates announcements.
func (r *rig) waitFor(ctx context.Context, want func(counts) bool, templates int, onTemplates func()) (counts, error) {
	seen := false
	for {
		t0 := time.Now()
		c, err := r.count(ctx)
		if err != nil {
			return c, err
		}
		if !seen && c.templates >= templates {
			seen = true
			if onTemplates != nil {
				onTemplates()
			}
		}
		if seen && want(c) {
			return c, nil
		}
		pause := max(10*time.Millisecond, 8*time.Since(t0))
		select {
		case <-ctx.Done():
			return c, fmt.Errorf("not converged (%d links, %d routes, %d templates, settled %v): %w",
				c.links, c.routes, c.templates, c.settled, ctx.Err())
		case <-time.After(pause):
		}
	}
}

// tallier is the memory store's count of records by state, kept as they change:
// listing a million routes to count them would take longer than converging them.
type tallier interface {
	Tally() (memory.LinkTally, memory.RouteTally)
}

// countSQL is count on the SQLite file.
func (r *rig) countSQL(ctx context.Context) (counts, error) {
	var c counts
	var notLinks, notRoutes int
	err := r.db.QueryRowContext(ctx, `SELECT COUNT(*),
		COALESCE(SUM(status != 'applied' OR dest_node = '' OR deleted != 0), 0) FROM links`).Scan(&c.links, &notLinks)
	if err != nil {
		return c, err
	}
	err = r.db.QueryRowContext(ctx, `SELECT COALESCE(SUM(source_node = '*' AND deleted = 0), 0),
		COALESCE(SUM(source_node != '*'), 0),
		COALESCE(SUM(source_node != '*' AND (status != 'applied' OR deleted != 0)), 0) FROM routes`).Scan(&c.templates, &c.routes, &notRoutes)
	c.settled = notLinks == 0 && notRoutes == 0
	return c, err
}

func (r *rig) converged(links, routes int) func(counts) bool {
	return func(c counts) bool {
		return c.settled && c.links == links && (routes < 0 || c.routes == routes)
	}
}

// runScenario runs one scenario on a fresh control plane with the given store.
func runScenario(ctx context.Context, c options, name, storeKind string) []measure {
	topology := groupName(0)
	switch name {
	case "mesh", "crash":
		topology = "*"
	case "restart":
		topology = "" // API mode
	}
	base := measure{scenario: name, store: storeKind, nodes: c.nodes, groups: c.groups}
	fail := func(err error) []measure { base.failed = err; return []measure{base} }
	start := time.Now()
	r, err := startRig(ctx, c, storeKind, topology)
	if err != nil {
		return fail(err)
	}
	defer r.close()
	if topology == "" {
		if err := r.hubSegment(ctx); err != nil {
			return fail(err)
		}
	}
	if _, err := r.waitFor(ctx, r.converged(r.wantLinks(), 0), 0, nil); err != nil {
		return fail(fmt.Errorf("links: %w", err))
	}
	base.fleetStartup = time.Since(start)
	fmt.Fprintf(os.Stderr, "%s/%s: %d links converged after %s\n", name, storeKind, r.wantLinks(), base.fleetStartup.Round(time.Millisecond))

	var out []measure
	switch name {
	case "names":
		m := base
		m.goal = goalFor(c, storeKind)
		r.event(ctx, &m, func() error {
			for g := range c.groups {
				if err := r.nodes[g].Announce(dataplane.NewName("org", "bench", groupName(g))); err != nil {
					return err
				}
			}
			return nil
		}, c.groups, r.wantLinks(), c.groups*(c.groups-1))
		out = append(out, m)
	case "mesh", "crash":
		m := base
		m.scenario = "mesh"
		m.goal = goalFor(c, storeKind)
		r.event(ctx, &m, func() error {
			for _, n := range r.nodes {
				if err := n.Announce(dataplane.NewName("org", "bench", "svc")); err != nil {
					return err
				}
			}
			return nil
		}, len(r.nodes), r.wantLinks(), 2*(c.groups-1))
		out = append(out, m)
		if name == "crash" && m.failed == nil {
			m := base
			m.goal = goalFor(c, storeKind)
			r.event(ctx, &m, func() error {
				for _, n := range r.nodes[:c.groups] { // n000 of every group
					n.Crash()
				}
				for _, n := range r.nodes[:c.groups] {
					if err := n.Restart(); err != nil {
						return err
					}
				}
				return nil
			}, len(r.nodes), r.wantLinks(), 2*(c.groups-1))
			out = append(out, m)
		}
	case "restart":
		out = append(out, r.restartScenario(ctx, base))
	default:
		return fail(fmt.Errorf("unknown scenario %q", name))
	}
	// The control plane's share of the heap: what stopping it frees.
	before := liveHeap()
	fmt.Fprintf(os.Stderr, "%s/%s: heap after convergence (whole process): %d MiB live, %d MiB of it scannable by the collector\n",
		name, storeKind, before>>20, scannableHeap()>>20)
	heap := r.stopCP(before)
	for i := range out {
		out[i].heapCP = heap
	}
	return out
}

func goalFor(c options, storeKind string) time.Duration {
	if c.nodes > 1000 {
		return 10 * time.Second
	}
	if storeKind == "sqlite" {
		return 4 * time.Second
	}
	return 2 * time.Second
}

// hubSegment links group 0 with every other group in one segment, through the
// service as the northbound API would (API mode).
func (r *rig) hubSegment(ctx context.Context) error {
	svc := r.srv.Service()
	if _, err := svc.AddSegment(ctx, "hub"); err != nil {
		return err
	}
	for g := 1; g < r.c.groups; g++ {
		res, err := svc.AddSegmentLink(ctx, "hub", groupName(0), groupName(g))
		if err != nil {
			return fmt.Errorf("segment link %s-%s: %w", groupName(0), groupName(g), err)
		}
		r.srv.Enqueue(res) // as the northbound handler does: reconcile the nodes it touched
	}
	return nil
}

// restartScenario converges names, then restarts the control plane on the same
// southbound address and database (SQLite: a memory store starts empty), and times it until every link and route is
// Applied again with exactly one connection per link and one subscription per route
// on every node.
func (r *rig) restartScenario(ctx context.Context, base measure) measure {
	names := base
	names.scenario = "names (before restart)"
	names.goal = goalFor(r.c, r.storeKind)
	wantRoutes := r.c.groups * (r.c.groups - 1)
	r.event(ctx, &names, func() error {
		for g := range r.c.groups {
			if err := r.nodes[g].Announce(dataplane.NewName("org", "bench", groupName(g))); err != nil {
				return err
			}
		}
		return nil
	}, r.c.groups, r.wantLinks(), wantRoutes)
	if names.failed != nil {
		return names
	}
	m := base
	m.goal = 5 * time.Second
	r.cfg.Southbound.Endpoint = r.srv.SouthboundAddr()
	r.event(ctx, &m, func() error {
		r.stop()
		return r.startCP(ctx)
	}, r.c.groups, r.wantLinks(), wantRoutes)
	// event verifies once; a restart may need a moment more for the last stray to go.
	deadline := time.Now().Add(10 * time.Second)
	for m.failed == nil && m.verified != nil && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
		m.verified = cpharness.Converged(ctx, r.srv.Store(), r.fabric, true)
	}
	return m
}

// event times fire until every link and route is Applied, with the fleet registered
// and templates announcements stored.
func (r *rig) event(ctx context.Context, m *measure, fire func() error, templates, links, routes int) {
	m.load = loadAvg()
	r.writeHeapProfile(".before")
	stopProfile := r.profileEvent()
	defer stopProfile()
	cpu0, cmd0 := cpuTime(), r.counter.n.Load()
	t0 := time.Now()
	if err := fire(); err != nil {
		m.failed = err
		return
	}
	want := r.converged(links, routes)
	registered := func(c counts) bool { return want(c) && r.allRegistered() }
	c, err := r.waitFor(ctx, registered, templates, func() { m.lastStored = time.Since(t0) })
	m.converge = time.Since(t0)
	// The store can read settled a moment before the datapaths are: a node that
	// crashed and registered again still has its links Applied until the control
	// plane has handled its new session. Converged means both agree: until the
	// datapaths match, the store is read again, and the time is when it last read
	// settled before they did (the check itself, a second at 10,000 nodes, is not
	// counted).
	for err == nil {
		if m.verified = cpharness.Converged(ctx, r.srv.Store(), r.fabric, true); m.verified == nil || ctx.Err() != nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
		c, err = r.waitFor(ctx, registered, templates, nil)
		m.converge = time.Since(t0)
	}
	m.cpu, m.commands = cpuTime()-cpu0, r.counter.n.Load()-cmd0
	stopProfile()
	r.writeHeapProfile("")
	m.links, m.routes = c.links, c.routes
	m.load += " → " + loadAvg()
	if err != nil {
		m.failed = err
		return
	}
	fmt.Fprintf(os.Stderr, "%s/%s: converged in %s (last announcement stored after %s), CPU %s, %d ConfigCommands, %d links, %d routes, load %s, verified %v\n",
		m.scenario, m.store, m.converge.Round(time.Millisecond), m.lastStored.Round(time.Millisecond), m.cpu.Round(10*time.Millisecond),
		m.commands, m.links, m.routes, m.load, m.verified)
}

// profileEvent starts a CPU profile of one event when -eventprofile asks for it (and
// -cpuprofile does not already profile everything); the function returned stops it,
// once.
func (r *rig) profileEvent() func() {
	if r.c.eventProfile == "" || r.c.cpuProfile != "" {
		return func() {}
	}
	f, err := os.Create(r.c.eventProfile)
	if err != nil {
		fmt.Fprintln(os.Stderr, "event profile:", err)
		return func() {}
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		_ = f.Close()
		fmt.Fprintln(os.Stderr, "event profile:", err)
		return func() {}
	}
	var once sync.Once
	return func() { once.Do(func() { pprof.StopCPUProfile(); _ = f.Close() }) }
}

// writeHeapProfile writes the heap profile to -heapprofile's file with suffix, after a
// collection (so that its in-use figures are what is live), when asked to.
func (r *rig) writeHeapProfile(suffix string) {
	if r.c.heapProfile == "" {
		return
	}
	runtime.GC()
	f, err := os.Create(r.c.heapProfile + suffix)
	if err == nil {
		err = pprof.Lookup("heap").WriteTo(f, 0)
		_ = f.Close()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "heap profile:", err)
	}
}

// allRegistered reports whether every node holds a registered session now.
func (r *rig) allRegistered() bool {
	for _, n := range r.nodes {
		if c := n.Controller(); c == nil || !c.Registered() {
			return false
		}
	}
	return true
}
