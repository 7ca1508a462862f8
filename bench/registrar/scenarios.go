package main

import (
	"context"
	"errors"
	"fmt"
	"sort"
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

// openWatchers opens n raw watch streams spread over conns and reads each one's
// initial phase; it returns the streams and how long that took.
func openWatchers(ctx context.Context, conns []*grpc.ClientConn, n int) ([]grpc.ServerStreamingClient[registrarv1.EndpointEvent], time.Duration, error) {
	streams := make([]grpc.ServerStreamingClient[registrarv1.EndpointEvent], n)
	errs := make(chan error, n)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st, err := rawWatch(ctx, conns[i%len(conns)], fmt.Sprintf("w%d", i))
			if err == nil {
				_, err = untilComplete(st)
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

// fanout times RegisterEndpoint until the last watcher has the event. The watchers
// run in a child process, as agents run on their own nodes: the registrar's process
// carries only the registrar.
func fanout(ctx context.Context, e *env, o options) ([]result, error) {
	srv, stop, err := e.preloaded(ctx, "fanout", o.endpoints)
	if err != nil {
		return nil, err
	}
	defer stop()
	regs := o.registrations
	conns, err := dialN(srv.Addr().String(), 1)
	if err != nil {
		return nil, err
	}
	defer closeAll(conns)
	api := registrarv1.NewRegistrarClient(conns[0])
	started := make([]int64, regs)
	var seen []int64
	err = runChild(ctx, []string{"-role", "fanout-watchers", "-target", srv.Addr().String(),
		"-watchers", fmt.Sprint(o.watchers), "-conns", fmt.Sprint(o.conns), "-registrations", fmt.Sprint(regs)},
		func() error { return registerPaced(ctx, api, o.interval, started, fanoutEndpoint) }, &seen)
	if err != nil {
		return nil, err
	}
	if len(seen) != regs {
		return nil, fmt.Errorf("fan-out: watchers reported %d registrations, want %d", len(seen), regs)
	}
	lat := sortedLatencies(seen, started)
	p50, p99 := percentile(lat, 50), percentile(lat, 99)
	what := fmt.Sprintf("%d watchers / %d conns (separate process), %d endpoints, %d registrations %s apart", o.watchers, o.conns, o.endpoints, regs, o.interval)
	return []result{
		{scenario: "Fan-out p50 (RegisterEndpoint → last watcher)", setup: what, value: ms(p50), anchor: "14.5 ms"},
		{scenario: "Fan-out p99", setup: what, value: ms(p99), goal: "≤ 25 ms", anchor: "76 ms", ok: ptr(p99 <= 25*time.Millisecond)},
		{scenario: "Fan-out max", setup: what, value: ms(lat[len(lat)-1])},
	}, nil
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

// fanoutWatchers is the fan-out child: it holds n watchers, and for each of the
// registrations reports when the last watcher received it (Unix nanoseconds).
func fanoutWatchers(target string, n, conns, regs int) error {
	cs, err := dialN(target, conns)
	if err != nil {
		return err
	}
	defer closeAll(cs)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	streams, _, err := openWatchers(ctx, cs, n)
	if err != nil {
		return err
	}
	index := make(map[string]int, regs)
	for i := range regs {
		index[fanoutEndpoint(i).Address] = i
	}
	last := make([]atomic.Int64, regs)
	var all sync.WaitGroup
	all.Add(regs * n)
	for _, st := range streams {
		go func() {
			for {
				var msg []byte
				if err := st.RecvMsg(&msg); err != nil {
					return
				}
				at := time.Now().UnixNano()
				ev, err := parse(msg)
				if err != nil || ev.typ != registrarv1.EndpointEvent_ENDPOINT_ADDED {
					continue
				}
				if i, ok := index[ev.address]; ok {
					atomicMax(&last[i], at)
					all.Done()
				}
			}
		}()
	}
	fmt.Println("ready")
	if err := waitGroup(&all, 2*time.Minute); err != nil {
		return fmt.Errorf("not every watcher got every registration: %w", err)
	}
	for i := range last {
		fmt.Println(last[i].Load())
	}
	return nil
}

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
	if _, err := registrarv1.NewRegistrarClient(conns[0]).ListAllEndpoints(ctx, &registrarv1.ListAllEndpointsRequest{Service: "none"}); err != nil {
		return nil, err // connects, without building the snapshot
	}
	timeOne := func() (time.Duration, error) {
		wctx, cancel := context.WithCancel(ctx)
		defer cancel()
		t0 := time.Now()
		st, err := rawWatch(wctx, conns[0], "new")
		if err != nil {
			return 0, err
		}
		items, err := untilComplete(st)
		if err != nil {
			return 0, err
		}
		if items != n {
			return 0, fmt.Errorf("snapshot carried %d endpoints, want %d", items, n)
		}
		return time.Since(t0), nil
	}
	cold, err := timeOne()
	if err != nil {
		return nil, err
	}
	warm, err := timeOne()
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
		{scenario: "New watcher's full snapshot until SNAPSHOT_COMPLETE (snapshot built for it)", setup: what, value: ms(cold), anchor: anchor},
		{scenario: "New watcher's full snapshot (snapshot already built)", setup: what, value: ms(warm)},
		{scenario: "Real agent client: New until WaitReady (decodes and indexes)", setup: what, value: ms(real)},
	}
	if goal > 0 {
		rows[0].goal, rows[0].ok = "≤ "+ms(goal), ptr(cold <= goal)
	}
	return rows, nil
}

func storm(ctx context.Context, e *env, o options) ([]result, error) {
	srv, stop, err := e.preloaded(ctx, "storm", o.endpoints)
	if err != nil {
		return nil, err
	}
	defer stop()
	conns, err := dialN(srv.Addr().String(), o.conns)
	if err != nil {
		return nil, err
	}
	defer closeAll(conns)
	for _, c := range conns { // connected before the storm, as after a restart's reconnects
		if _, err := registrarv1.NewRegistrarClient(c).ListAllEndpoints(ctx, &registrarv1.ListAllEndpointsRequest{Service: "none"}); err != nil {
			return nil, err
		}
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	_, took, err := openWatchers(wctx, conns, o.stormWatchers)
	if err != nil {
		return nil, err
	}
	return []result{{scenario: "Reconnect storm: every watcher has its full snapshot",
		setup: fmt.Sprintf("%d watchers / %d conns × %d endpoints", o.stormWatchers, o.conns, o.endpoints),
		value: ms(took), goal: "≤ 5 s", anchor: "48 s", ok: ptr(took <= 5*time.Second)}}, nil
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
	what := fmt.Sprintf("%d clients × %d registrations (one RPC each), batch %s / %d", o.batchClients, per, "100ms", 50)
	return []result{
		{scenario: "Write batching: backend Apply calls", setup: what, value: fmt.Sprint(applies), goal: "≤ 25", anchor: "1,000 writes", ok: ptr(applies <= 25)},
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
