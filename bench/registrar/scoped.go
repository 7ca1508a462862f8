package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"

	"github.com/switchboard-mesh/switchboard/endpoint"
	registrarv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/registrar/v1"
	"github.com/switchboard-mesh/switchboard/registrar/client"
	"github.com/switchboard-mesh/switchboard/registry"
)

// The scoped scenario compares demand-scoped watches with watching everything, in
// a fleet of o.snapshotLarge endpoints over scopedServices services, where each
// agent needs scopedInterest of them.
const (
	scopedServices = 1000
	scopedInterest = 10
)

func scopedEndpoint(i int) endpoint.Endpoint {
	return endpoint.Endpoint{Cluster: "east", Service: scopedService(i % scopedServices), Protocol: "http",
		Address: fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255), Port: 8080, Priority: 1}
}

func scopedService(i int) string { return "svc" + strconv.Itoa(i) }

// interestOf is the set of services agent j needs: every service is needed by the
// same number of agents.
func interestOf(j int) []string {
	out := make([]string, scopedInterest)
	for k := range out {
		out[k] = scopedService((j*scopedInterest + k) % scopedServices)
	}
	return out
}

func scoped(ctx context.Context, e *env, o options) ([]result, error) {
	e.scenario("scoped")
	b, err := e.backend(ctx)
	if err != nil {
		return nil, err
	}
	defer closeQuietly(b)
	n := o.snapshotLarge
	for i := 0; i < n; i += 5000 {
		ops := make([]registry.Op, 0, 5000)
		for j := i; j < min(n, i+5000); j++ {
			ops = append(ops, registry.Register(scopedEndpoint(j)))
		}
		if err := b.Apply(ctx, ops); err != nil {
			return nil, fmt.Errorf("preload: %w", err)
		}
	}
	srv, err := startRegistrar(b, nil)
	if err != nil {
		return nil, err
	}
	defer srv.stop()
	addr := srv.Addr().String()
	fleet := fmt.Sprintf("%d endpoints in %d services; each agent needs %d", n, scopedServices, scopedInterest)

	var rows []result
	per := map[bool]float64{}
	for _, sc := range []bool{false, true} {
		agents := o.agents
		if !sc {
			agents = max(1, agents/50) // each holds the whole fleet
		}
		var out []int64
		err := runChild(ctx, []string{"-role", "scoped-agents", "-target", addr, "-agents", strconv.Itoa(agents), "-scoped=" + strconv.FormatBool(sc)},
			func() error { return nil }, &out)
		if err != nil {
			return nil, err
		}
		if len(out) != 1 {
			return nil, fmt.Errorf("scoped agents child printed %v", out)
		}
		per[sc] = float64(out[0]) / 1024
		rows = append(rows, result{scenario: "Agent memory, " + scopeWord(sc), setup: fmt.Sprintf("%s; %d agents (registrar clients) in one process, heap + stacks per agent", fleet, agents),
			value: fmt.Sprintf("%.0f KiB", per[sc])})
	}
	ratio := per[true] / per[false]
	rows = append(rows, result{scenario: "Agent memory, scoped ÷ every service", setup: fleet, value: fmt.Sprintf("%.3f", ratio), goal: "≤ 0.1", ok: ptr(ratio <= 0.1)})

	for _, sc := range []bool{false, true} {
		r, err := scopedFanout(ctx, addr, o, sc)
		if err != nil {
			return nil, err
		}
		r.setup = fleet + "; " + r.setup
		rows = append(rows, r)
	}
	return rows, nil
}

func scopeWord(sc bool) string {
	if sc {
		return "scoped to 10 services"
	}
	return "every service"
}

// scopedAgents is the child measuring agent memory: n registrar clients, each
// watching its services (or everything), measured once all are synced.
func scopedAgents(target string, n int, sc bool) error {
	before := inUse()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	clients := make([]*client.Client, n)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for j := range n {
		c, err := client.New(client.Options{Addresses: []string{target}, Scoped: sc, Node: fmt.Sprintf("agent-%d", j)})
		if err != nil {
			return err
		}
		clients[j] = c
		filters := []endpoint.Filter{{}}
		if sc {
			filters = filters[:0]
			for _, s := range interestOf(j) {
				filters = append(filters, endpoint.Filter{Service: s})
			}
		}
		for _, f := range filters {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := untilSynced(ctx, c, f); err != nil {
					errs <- err
				}
			}()
		}
	}
	if err := waitGroup(&wg, 5*time.Minute); err != nil {
		return err
	}
	close(errs)
	if err := <-errs; err != nil {
		return err
	}
	after := inUse()
	fmt.Println("ready")
	fmt.Println((int64(after) - int64(before)) / int64(n))
	for _, c := range clients {
		_ = c.Close()
	}
	return nil
}

// untilSynced watches f and drains the watch in the background once it has synced.
func untilSynced(ctx context.Context, c *client.Client, f endpoint.Filter) error {
	ch, err := c.Watch(ctx, f)
	if err != nil {
		return err
	}
	for ev := range ch {
		if ev.Type == registry.Synced {
			go func() {
				for range ch {
				}
			}()
			return nil
		}
	}
	return errors.New("watch ended before Synced")
}

// scopedFanout times registrations until the last watcher that needs each one has
// it, with o.watchers raw streams that are scoped or watch everything.
func scopedFanout(ctx context.Context, addr string, o options, sc bool) (result, error) {
	conns, err := dialN(addr, 1)
	if err != nil {
		return result{}, err
	}
	defer closeAll(conns)
	api := registrarv1.NewRegistrarClient(conns[0])
	regs := o.registrations
	started := make([]int64, regs)
	var seen []int64
	err = runChild(ctx, []string{"-role", "scoped-fanout", "-target", addr, "-watchers", fmt.Sprint(o.watchers),
		"-conns", fmt.Sprint(o.conns), "-registrations", fmt.Sprint(regs), "-scoped=" + strconv.FormatBool(sc)},
		func() error {
			return registerPaced(ctx, api, o.interval, started, func(i int) endpoint.Endpoint { return scopedFanoutEndpoint(i, sc) })
		}, &seen)
	if err != nil {
		return result{}, err
	}
	if len(seen) != regs+1 {
		return result{}, fmt.Errorf("scoped fan-out: child reported %d values, want %d", len(seen), regs+1)
	}
	p99 := percentile(sortedLatencies(seen[:regs], started), 99)
	return result{scenario: "Fan-out p99, " + scopeWord(sc),
		setup: fmt.Sprintf("%d watchers / %d conns, %d registrations %s apart; watchers received %.1f MiB in all",
			o.watchers, o.conns, regs, o.interval, float64(seen[regs])/(1<<20)),
		value: ms(p99)}, nil
}

// scopedFanoutEndpoint is registration i of a fan-out run: of service i mod the
// services, new in each run (a second registration of the same value sends nothing).
func scopedFanoutEndpoint(i int, sc bool) endpoint.Endpoint {
	e := scopedEndpoint(i)
	run := 251
	if sc {
		run = 252
	}
	e.Address = fmt.Sprintf("10.%d.%d.%d", run, i/256, i%256)
	return e
}

// scopedFanoutWatchers is the fan-out child: n raw streams, scoped or not; for each
// registration it reports when the last watcher that needs it received it, then the
// bytes all watchers received.
func scopedFanoutWatchers(target string, n, conns, regs int, sc bool) error {
	cs, ctx, done, err := childConns(target, conns)
	if err != nil {
		return err
	}
	defer done()
	index := make(map[string]int, regs)
	needs := make([]int, regs) // watchers that need registration i
	for i := range regs {
		index[scopedFanoutEndpoint(i, sc).Address] = i
	}
	streams := make([]grpc.ClientStream, n)
	wants := make([]map[int]bool, n)
	for j := range n {
		var st grpc.ClientStream
		api := registrarv1.NewRegistrarClient(cs[j%len(cs)])
		req := &registrarv1.WatchEndpointsRequest{NodeName: fmt.Sprintf("w%d", j), AcceptBatches: transport.batches}
		if sc {
			req.Services = interestOf(j)
		}
		st, err = api.WatchEndpoints(ctx, req, raw)
		if err != nil {
			return err
		}
		if _, err := untilComplete(st); err != nil {
			return err
		}
		streams[j] = st
		wants[j] = map[int]bool{}
		for i := range regs {
			if !sc || slices.Contains(req.Services, scopedFanoutEndpoint(i, sc).Service) {
				wants[j][i] = true
				needs[i]++
			}
		}
	}
	last := make([]atomic.Int64, regs)
	got := make([]atomic.Int64, regs)
	var bytes atomic.Int64
	var all sync.WaitGroup
	for i := range regs {
		all.Add(needs[i])
	}
	for j, st := range streams {
		go func() {
			for {
				var msg []byte
				if err := st.RecvMsg(&msg); err != nil {
					return
				}
				at := time.Now().UnixNano()
				bytes.Add(int64(len(msg)))
				_ = eachEvent(msg, func(ev event) {
					if i, ok := index[string(ev.address)]; ok && wants[j][i] && ev.typ == registrarv1.EndpointEvent_ENDPOINT_ADDED {
						atomicMax(&last[i], at)
						got[i].Add(1)
						all.Done()
					}
				})
			}
		}()
	}
	fmt.Println("ready")
	if err := waitGroup(&all, 2*time.Minute); err != nil {
		for i := range regs {
			if n := got[i].Load(); n != int64(needs[i]) {
				return fmt.Errorf("registration %d (%s) reached %d of the %d watchers that need it: %w", i, scopedFanoutEndpoint(i, sc).Key(), n, needs[i], err)
			}
		}
		return fmt.Errorf("not every watcher got every registration it needs: %w", err)
	}
	for i := range last {
		fmt.Println(last[i].Load())
	}
	fmt.Println(bytes.Load())
	return nil
}
