package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/switchboard-mesh/switchboard/endpoint"
	registrarv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/registrar/v1"
	registryv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/registry/v1"
	"github.com/switchboard-mesh/switchboard/registrar"
	"github.com/switchboard-mesh/switchboard/registrar/client"
	"github.com/switchboard-mesh/switchboard/registry"
)

// openWatchers opens n raw watch streams spread over conns, resuming from token
// (none: each takes a full snapshot), and reads each one's initial phase; it
// returns the streams and how long that took.
func openWatchers(ctx context.Context, conns []*grpc.ClientConn, n int, token string) ([]grpc.ServerStreamingClient[registrarv1.EndpointEvent], time.Duration, error) {
	streams := make([]grpc.ServerStreamingClient[registrarv1.EndpointEvent], n)
	errs := make(chan error, n)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st, err := rawWatch(ctx, conns[i%len(conns)], fmt.Sprintf("w%d", i), token)
			if err == nil {
				err = untilCompleteFast(st)
			}
			if err != nil {
				errs <- err
				return
			}
			streams[i] = st
		}()
	}
	wg.Wait()
	took := time.Since(start)
	close(errs)
	if err := <-errs; err != nil {
		return nil, 0, err
	}
	return streams, took, nil
}

// fanoutCase is one size of the fan-out scenario.
type fanoutCase struct {
	watchers, conns, endpoints int
	// resume makes the watchers resume from the registrar's current version, as
	// agents reconnecting with their tokens do, instead of each taking a full
	// snapshot: at 10,000 watchers × 100,000 endpoints the snapshots would be the
	// storm scenario, not the fan-out.
	resume bool
	goal   time.Duration
	anchor string
	// page opens the registrar's web page for the run, in a process of its own
	// as a browser is (pageViewer), counting its fetches in fetched.
	page    bool
	fetched *atomic.Int64
	p99     *time.Duration // if set, receives the run's p99
}

// fanout times RegisterEndpoint until the last watcher has the event. The watchers
// run in a child process, as agents run on their own nodes: the registrar's process
// carries only the registrar.
func fanout(ctx context.Context, e *env, o options, c fanoutCase) ([]result, error) {
	srv, stop, err := e.preloaded(ctx, fmt.Sprintf("fanout%d", c.watchers), c.endpoints)
	if err != nil {
		return nil, err
	}
	defer stop()
	if c.page {
		viewer, err := startChild(ctx, []string{"-role", "page-viewer", "-target", "http://" + srv.HealthAddr().String()}, "")
		if err != nil {
			return nil, err
		}
		defer func() { c.fetched.Add(viewer.count()) }()
	}
	regs := o.registrations
	conns, err := dialN(srv.Addr().String(), 1)
	if err != nil {
		return nil, err
	}
	defer closeAll(conns)
	api := registrarv1.NewRegistrarClient(conns[0])
	token := ""
	if c.resume {
		resp, err := api.ListAllEndpoints(ctx, &registrarv1.ListAllEndpointsRequest{Service: "none"})
		if err != nil {
			return nil, err
		}
		token = resp.GetVersion()
	}
	started := make([]int64, regs)
	var seen []int64
	err = runChild(ctx, []string{"-role", "fanout-watchers", "-target", srv.Addr().String(), "-token", token,
		"-watchers", fmt.Sprint(c.watchers), "-conns", fmt.Sprint(c.conns), "-registrations", fmt.Sprint(regs)},
		func() error { return registerPaced(ctx, api, o.interval, started, fanoutEndpoint) }, &seen)
	if err != nil {
		return nil, err
	}
	if len(seen) != regs+2 {
		return nil, fmt.Errorf("fan-out: watchers reported %d registrations, want %d", len(seen)-2, regs)
	}
	msgs, events := seen[regs], seen[regs+1]
	seen = seen[:regs]
	if o.fanoutTrace != "" {
		if err := writeFanoutTrace(o.fanoutTrace, seen, started); err != nil {
			return nil, err
		}
	}
	lat := sortedLatencies(seen, started)
	p50, p99 := percentile(lat, 50), percentile(lat, 99)
	if c.p99 != nil {
		*c.p99 = p99
	}
	how := "separate process, " + transport.String()
	if c.resume {
		how += ", resumed from the current version"
	}
	what := fmt.Sprintf("%d watchers / %d conns (%s), %d endpoints, %d registrations %s apart", c.watchers, c.conns, how, c.endpoints, regs, o.interval)
	rows := []result{
		{scenario: "Fan-out p50 (RegisterEndpoint → last watcher)", setup: what, value: ms(p50)},
		{scenario: "Fan-out p99", setup: what, value: ms(p99), goal: "≤ " + ms(c.goal), anchor: c.anchor, ok: ptr(p99 <= c.goal)},
		{scenario: "Fan-out max", setup: what, value: ms(lat[len(lat)-1])},
		{scenario: "Fan-out: events per stream message the watchers received", setup: what,
			value: fmt.Sprintf("%.2f (%d events in %d messages)", float64(events)/float64(max(msgs, 1)), events, msgs)},
	}
	if c.anchor != "" {
		rows[0].anchor = "14.5 ms"
	}
	return rows, nil
}

// writeFanoutTrace writes, a line per registration, when it began (seconds after
// the first) and how long its event took to reach the last watcher (ms). Then, as
// "# gc S" lines, when each of this process's garbage collections ended (seconds
// after the first registration; the end of its mark) while the registrations ran: the
// registrar runs in this process, and the slow registrations can be set against its
// collections without aligning another tool's clock.
func writeFanoutTrace(path string, seen, started []int64) error {
	var b strings.Builder
	for i := range started {
		fmt.Fprintf(&b, "%.3f %.1f\n", float64(started[i]-started[0])/1e9, float64(seen[i]-started[i])/1e6)
	}
	for _, end := range collectionEnds(started[0], slices.Max(seen)) {
		fmt.Fprintf(&b, "# gc %.3f\n", float64(end-started[0])/1e9)
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

// collectionEnds returns when this process's garbage collections ended between from
// and to (Unix nanoseconds), oldest first. The runtime keeps the last 256.
func collectionEnds(from, to int64) []int64 {
	var st debug.GCStats
	st.Pause = make([]time.Duration, 0, 256) // asks for the pause history
	debug.ReadGCStats(&st)
	var ends []int64
	for _, t := range st.PauseEnd {
		if n := t.UnixNano(); n >= from && n <= to {
			ends = append(ends, n)
		}
	}
	slices.Sort(ends)
	return ends
}

// registerPaced registers endpointOf(i) for every i of started, one call every
// interval, noting in started when each call began (Unix nanoseconds).
func registerPaced(ctx context.Context, api registrarv1.RegistrarClient, interval time.Duration, started []int64, endpointOf func(int) endpoint.Endpoint) error {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for i := range started {
		started[i] = time.Now().UnixNano()
		ep := endpointOf(i).ToProto()
		if _, err := api.RegisterEndpoint(ctx, &registrarv1.RegisterEndpointRequest{Endpoints: []*registryv1.Endpoint{ep}}); err != nil {
			return err
		}
		<-tick.C
	}
	return nil
}

// sortedLatencies is seen[i] - started[i] for every registration, sorted.
func sortedLatencies(seen, started []int64) []time.Duration {
	lat := make([]time.Duration, len(started))
	for i := range lat {
		lat[i] = time.Duration(seen[i] - started[i])
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	return lat
}

// percentile is the p-th percentile of sorted latencies.
func percentile(lat []time.Duration, p int) time.Duration {
	return lat[min(len(lat)-1, len(lat)*p/100)]
}

func fanoutEndpoint(i int) endpoint.Endpoint {
	return endpoint.Endpoint{Cluster: "east", Service: "fanout", Protocol: "http", Address: fmt.Sprintf("10.250.%d.%d", i/256, i%256), Port: 80, Priority: 1}
}

// fanoutWatchers is the fan-out child: it holds n watchers (resumed from token, if
// set), and for each of the registrations reports when the last watcher received
// it (Unix nanoseconds).
func fanoutWatchers(target string, n, conns, regs int, token string) error {
	t := newFanoutTally(n, conns, regs)
	if transport.watcher == "h2" {
		cs, err := dialH2N(target, conns, h2Fatal)
		if err != nil {
			return err
		}
		defer closeH2(cs)
		then := func(conn int, msg []byte) error { return t.shards[conn].message(t, msg) }
		if _, err := h2Watchers(cs, slices.Repeat([]string{token}, n), nil, then, h2Fatal); err != nil {
			return err
		}
		return t.report()
	}
	cs, ctx, done, err := childConns(target, conns)
	if err != nil {
		return err
	}
	defer done()
	streams, _, err := openWatchers(ctx, cs, n, token)
	if err != nil {
		return err
	}
	for i, st := range streams {
		go func() {
			read := readMsg(func(msg []byte) error { return t.shards[i%conns].message(t, msg) })
			for st.RecvMsg(&read) == nil {
			}
		}()
	}
	return t.report()
}

// fanoutTally is what the fan-out child counts, with either kind of watcher: a
// shard per connection, so that the watchers' reading goroutines (one per
// connection for the lean watchers) do not contend for counters. Shared
// counters cost the child a contended atomic or four per event, and the child
// shares the registrar's two cores.
type fanoutTally struct {
	index  map[string]int // registration by address
	shards []*tallyShard
	all    sync.WaitGroup // one per shard
}

// tallyShard counts one connection's watchers.
type tallyShard struct {
	mu           sync.Mutex // uncontended with lean watchers: one goroutine per connection
	last         []int64    // when the last of its watchers had registration i
	left         int        // (watcher, registration) pairs still to come
	msgs, events int64
}

func newFanoutTally(watchers, conns, regs int) *fanoutTally {
	t := &fanoutTally{index: make(map[string]int, regs), shards: make([]*tallyShard, conns)}
	for i := range regs {
		t.index[fanoutEndpoint(i).Address] = i
	}
	for c := range t.shards {
		on := watchers / conns // watcher i is on connection i % conns
		if c < watchers%conns {
			on++
		}
		t.shards[c] = &tallyShard{last: make([]int64, regs), left: on * regs}
	}
	t.all.Add(conns)
	return t
}

// message counts one message a watcher of the shard received: the registrations
// its events add, when (one clock read a message), and whether they were the
// shard's last.
func (s *tallyShard) message(t *fanoutTally, msg []byte) error {
	now := time.Now().UnixNano()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.msgs++
	was := s.left
	err := eachEvent(msg, func(ev event) {
		s.events++
		if i, ok := t.index[string(ev.address)]; ok && ev.typ == registrarv1.EndpointEvent_ENDPOINT_ADDED {
			s.last[i] = max(s.last[i], now)
			s.left--
		}
	})
	if was > 0 && s.left <= 0 {
		t.all.Done()
	}
	return err
}

// report says ready, waits until every watcher has every registration and prints
// when the last one had each, then the messages and events received.
func (t *fanoutTally) report() error {
	fmt.Println("ready")
	if err := waitGroup(&t.all, 2*time.Minute); err != nil {
		return fmt.Errorf("not every watcher got every registration: %w", err)
	}
	var msgs, events int64
	last := make([]int64, len(t.shards[0].last))
	for _, s := range t.shards {
		s.mu.Lock()
		for i, at := range s.last {
			last[i] = max(last[i], at)
		}
		msgs, events = msgs+s.msgs, events+s.events
		s.mu.Unlock()
	}
	for _, at := range last {
		fmt.Println(at)
	}
	fmt.Println(msgs)
	fmt.Println(events)
	return nil
}

// snapshotScenario times one new watcher's full snapshot: right after READY (the
// registrar built it before declaring itself ready), after a change (built for
// this watcher) and once more (already built); then the real agent client.
func snapshotScenario(ctx context.Context, e *env, n int, goal time.Duration, anchor string) ([]result, error) {
	srv, stop, err := e.preloaded(ctx, fmt.Sprintf("snapshot%d", n), n)
	if err != nil {
		return nil, err
	}
	defer stop()
	if got := srv.Registrar().Counts()["east"]; got != n {
		return nil, fmt.Errorf("registrar holds %d endpoints, want %d", got, n)
	}
	conns, err := dialN(srv.Addr().String(), 1)
	if err != nil {
		return nil, err
	}
	defer closeAll(conns)
	api := registrarv1.NewRegistrarClient(conns[0])
	if _, err := api.ListAllEndpoints(ctx, &registrarv1.ListAllEndpointsRequest{Service: "none"}); err != nil {
		return nil, err // connects, without building the snapshot
	}
	timeOne := func(want int) (time.Duration, error) {
		wctx, cancel := context.WithCancel(ctx)
		defer cancel()
		t0 := time.Now()
		st, err := rawWatch(wctx, conns[0], "new", "")
		if err != nil {
			return 0, err
		}
		items, err := untilComplete(st)
		if err != nil {
			return 0, err
		}
		if items != want {
			return 0, fmt.Errorf("snapshot carried %d endpoints, want %d", items, want)
		}
		return time.Since(t0), nil
	}
	afterReady, err := timeOne(n)
	if err != nil {
		return nil, err
	}
	extra := endpoint.Endpoint{Cluster: "east", Service: "late", Protocol: "http", Address: "10.255.0.1", Port: 80, Priority: 1}
	if _, err := api.RegisterEndpoint(ctx, &registrarv1.RegisterEndpointRequest{Endpoints: []*registryv1.Endpoint{extra.ToProto()}}); err != nil {
		return nil, err
	}
	cold, err := timeOne(n + 1)
	if err != nil {
		return nil, err
	}
	warm, err := timeOne(n + 1)
	if err != nil {
		return nil, err
	}
	t0 := time.Now()
	c, err := client.New(client.Options{Addresses: []string{srv.Addr().String()}})
	if err != nil {
		return nil, err
	}
	defer closeQuietly(c)
	if err := c.WaitReady(ctx); err != nil {
		return nil, err
	}
	real := time.Since(t0)
	what := fmt.Sprintf("%d endpoints", n)
	rows := []result{
		{scenario: "New watcher's full snapshot until SNAPSHOT_COMPLETE, right after READY", setup: what, value: ms(afterReady)},
		{scenario: "New watcher's full snapshot until SNAPSHOT_COMPLETE (snapshot built for it, after a change)", setup: what, value: ms(cold), anchor: anchor},
		{scenario: "New watcher's full snapshot (snapshot already built)", setup: what, value: ms(warm)},
		{scenario: "Real agent client: New until WaitReady (decodes and indexes)", setup: what, value: ms(real)},
	}
	if goal > 0 {
		rows[0].goal, rows[0].ok = "≤ "+ms(goal), ptr(afterReady <= goal)
		rows[1].goal, rows[1].ok = "≤ "+ms(goal), ptr(cold <= goal)
	}
	return rows, nil
}

// storm opens every watcher at the same moment over established connections, each
// taking a full snapshot, as agents do after a registrar restart; the watchers run
// in a child process. It reports the time until every watcher has its snapshot and
// the peak resident memory of the process the registrar runs in (with the embedded
// etcd and this program), sampled every 10 ms.
func storm(ctx context.Context, e *env, watchers, conns, endpoints int, goal time.Duration) ([]result, error) {
	srv, stop, err := e.preloaded(ctx, fmt.Sprintf("storm%d", watchers), endpoints)
	if err != nil {
		return nil, err
	}
	defer stop()
	rssBefore, peak := rss(), sampleRSS()
	var out []int64
	err = runChild(ctx, []string{"-role", "storm-watchers", "-target", srv.Addr().String(),
		"-watchers", fmt.Sprint(watchers), "-conns", fmt.Sprint(conns)}, func() error { return nil }, &out)
	peakRSS := peak()
	if err != nil {
		return nil, err
	}
	if len(out) != 2 {
		return nil, fmt.Errorf("storm child printed %v", out)
	}
	took, bytes := time.Duration(out[0]), float64(out[1])
	what := fmt.Sprintf("%d watchers / %d conns (separate process, %s) × %d endpoints", watchers, conns, transport.String(), endpoints)
	rows := []result{{scenario: "Reconnect storm: every watcher has its full snapshot", setup: what,
		value: fmt.Sprintf("%s (%.2f GB at %.2f GB/s)", ms(took), bytes/1e9, bytes/1e9/took.Seconds())}}
	if goal > 0 {
		rows[0].goal, rows[0].ok, rows[0].anchor = "≤ "+ms(goal), ptr(took <= goal), "48 s (1,000 × 10,000)"
	}
	rows = append(rows, result{scenario: "Reconnect storm: peak RSS of the registrar's process (" + e.benchProcess() + ")", setup: what,
		value: fmt.Sprintf("%.0f MiB (%.0f MiB before)", float64(peakRSS)/(1<<20), float64(rssBefore)/(1<<20)), goal: "bounded (reported)"})
	return rows, nil
}

// stormWatchers is the storm child: it connects conns, then opens n watchers at
// once, and prints how long until every one had its snapshot (nanoseconds) and the
// bytes of the initial phases.
func stormWatchers(target string, n, conns int) error {
	open := stormGRPC
	if transport.watcher == "h2" {
		open = stormH2
	}
	took, err := open(target, n, conns)
	if err != nil {
		return err
	}
	fmt.Println("ready")
	fmt.Println(int64(took))
	fmt.Println(initialBytes.Load())
	return nil
}

// stormH2 is the storm with lean watchers; dialH2 exchanges SETTINGS, so the
// connections are up before the storm.
func stormH2(target string, n, conns int) (time.Duration, error) {
	cs, err := dialH2N(target, conns, h2Fatal)
	if err != nil {
		return 0, err
	}
	defer closeH2(cs)
	return h2Watchers(cs, make([]string, n), nil, nil, h2Fatal)
}

// stormGRPC is the storm with gRPC-go watchers.
func stormGRPC(target string, n, conns int) (time.Duration, error) {
	cs, ctx, done, err := childConns(target, conns)
	if err != nil {
		return 0, err
	}
	defer done()
	for _, c := range cs { // connected before the storm, as after a restart's reconnects
		if _, err := registrarv1.NewRegistrarClient(c).ListAllEndpoints(ctx, &registrarv1.ListAllEndpointsRequest{Service: "none"}); err != nil {
			return 0, err
		}
	}
	_, took, err := openWatchers(ctx, cs, n, "")
	return took, err
}

// rss is this process's resident set size in bytes, from /proc/self/statm.
func rss() int64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0
	}
	pages, _ := strconv.ParseInt(f[1], 10, 64)
	return pages * int64(os.Getpagesize())
}

func batching(ctx context.Context, e *env, o options) ([]result, error) {
	e.scenario("batching")
	b, err := e.backend(ctx)
	if err != nil {
		return nil, err
	}
	defer closeQuietly(b)
	cnt := &counting{Registry: b}
	srv, err := startRegistrar(cnt, nil)
	if err != nil {
		return nil, err
	}
	defer srv.stop()
	clients := make([]*client.Client, o.batchClients)
	for i := range clients {
		c, err := client.New(client.Options{Addresses: []string{srv.Addr().String()}})
		if err != nil {
			return nil, err
		}
		defer closeQuietly(c)
		if err := c.WaitReady(ctx); err != nil {
			return nil, err
		}
		clients[i] = c
	}
	per := o.batchEndpoints / o.batchClients
	total := per * o.batchClients
	revBefore, err := e.revision(ctx)
	if err != nil {
		return nil, err
	}
	cnt.applies.Store(0)
	var wg sync.WaitGroup
	errs := make(chan error, len(clients))
	t0 := time.Now()
	for i, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range per {
				e := endpoint.Endpoint{Cluster: "east", Service: "burst", Protocol: "http", Address: fmt.Sprintf("10.%d.%d.1", i, j), Port: 80, Priority: 1}
				if err := c.Apply(ctx, []registry.Op{registry.Register(e)}); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	accepted := time.Since(t0)
	close(errs)
	if err := <-errs; err != nil {
		return nil, err
	}
	deadline := time.Now().Add(time.Minute)
	for srv.Registrar().Pending() > 0 || cnt.ops.Load() < int64(total) {
		if time.Now().After(deadline) {
			return nil, errors.New("batching: writes not persisted within a minute")
		}
		time.Sleep(time.Millisecond)
	}
	persisted := time.Duration(cnt.lastOK.Load() - t0.UnixNano())
	applies := cnt.applies.Load()
	revAfter, err := e.revision(ctx)
	if err != nil {
		return nil, err
	}
	txns := revAfter - revBefore
	what := fmt.Sprintf("%d clients × %d registrations (one RPC each), batch %s / %d", o.batchClients, per, "100ms", 50)
	return []result{
		{scenario: "Write batching: backend transactions (etcd revisions, header before → after)", setup: what, value: fmt.Sprint(txns), goal: "≤ 25", anchor: "1,000 writes", ok: ptr(txns <= 25)},
		{scenario: "Write batching: backend Apply calls", setup: what, value: fmt.Sprint(applies)},
		{scenario: "Write batching: all persisted after", setup: what, value: ms(persisted), goal: "≤ 1 s", ok: ptr(persisted <= time.Second)},
		{scenario: "Write batching: all accepted (RPCs returned) after", setup: what, value: ms(accepted)},
	}, nil
}

func cachedRead(ctx context.Context, e *env) ([]result, error) {
	e.scenario("read")
	b, err := e.backend(ctx)
	if err != nil {
		return nil, err
	}
	defer closeQuietly(b)
	ops := make([]registry.Op, 100)
	for i := range ops {
		ops[i] = registry.Register(endpoint.Endpoint{Cluster: "east", Service: "web", Protocol: "http", Address: fmt.Sprintf("10.0.0.%d", i), Port: 80, Priority: 1})
	}
	if err := b.Apply(ctx, ops); err != nil {
		return nil, err
	}
	srv, err := startRegistrar(b, func(c *registrar.Config) {})
	if err != nil {
		return nil, err
	}
	defer srv.stop()
	c, err := client.New(client.Options{Addresses: []string{srv.Addr().String()}})
	if err != nil {
		return nil, err
	}
	defer closeQuietly(c)
	if err := c.WaitReady(ctx); err != nil {
		return nil, err
	}
	f := endpoint.Filter{Service: "web"}
	var bad error
	r := testing.Benchmark(func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if eps, err := c.List(ctx, f); err != nil || len(eps) != 100 {
				bad = fmt.Errorf("List = %d endpoints, %v", len(eps), err)
			}
		}
	})
	if bad != nil {
		return nil, bad
	}
	ns := time.Duration(r.NsPerOp())
	return []result{{scenario: "Client cached read of one service", setup: "100 endpoints",
		value: fmt.Sprintf("%d ns/op, %d allocs/op", r.NsPerOp(), r.AllocsPerOp()), goal: "< 1 µs, 0 allocs",
		ok: ptr(ns < time.Microsecond && r.AllocsPerOp() == 0)}}, nil
}

func atomicMax(a *atomic.Int64, v int64) {
	for {
		cur := a.Load()
		if v <= cur || a.CompareAndSwap(cur, v) {
			return
		}
	}
}

func waitGroup(wg *sync.WaitGroup, d time.Duration) error {
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-time.After(d):
		return fmt.Errorf("timed out after %s", d)
	}
}

func ms(d time.Duration) string {
	switch {
	case d >= 10*time.Second:
		return fmt.Sprintf("%.1f s", d.Seconds())
	case d >= time.Second:
		return fmt.Sprintf("%.2f s", d.Seconds())
	default:
		return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond))
	}
}

func ptr[T any](v T) *T { return &v }
