package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/switchboard-mesh/switchboard/endpoint"
	registrarv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/registrar/v1"
	registryv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/registry/v1"
	"github.com/switchboard-mesh/switchboard/internal/backoff"
	"github.com/switchboard-mesh/switchboard/registrar"
	"github.com/switchboard-mesh/switchboard/registry"
)

// The slowbackend scenario: a gray failure of the backend. Agents keep writing
// to a registrar over etcd while a reader lists and a watcher watches; for
// slowWindow every backend Apply first waits 2 s. It compares the reads of that
// window with those of an unslowed window of the same length just before, and
// counts what the registrar did with the writes: the deepest its queue got
// (against its bound), how many it refused with RESOURCE_EXHAUSTED and, once the
// backend is fast again and the queue drained, how many acknowledged writes the
// backend does not hold (the lost ones).
const (
	slowLag = 2 * time.Second
	// slowQueue is the registrar's MaxQueue. At -agents 200 the agents offer 400 writes/s (200 ×
	// one per 500 ms) and a slow Apply lets through at most MaxQueue per 2 s, 100/s:
	// the slow window fills the queue.
	slowQueue      = 200
	slowKeysEach   = 20 // endpoints each agent owns and rewrites in turn
	slowWriteEvery = 500 * time.Millisecond
	slowListEvery  = 20 * time.Millisecond
)

// slowWindow is -slow-window: how long Applies are slowed, and the length of the
// unslowed window they are compared with.
var slowWindow = 30 * time.Second

// slowed wraps a backend and, while delay is set, makes each Apply wait that long
// first (honouring its context); it keeps the change feed.
type slowed struct {
	registry.Registry
	delay   atomic.Int64 // nanoseconds
	phase   *atomic.Int32
	longest [3]atomic.Int64 // the longest Apply per window, nanoseconds
}

func (s *slowed) Apply(ctx context.Context, ops []registry.Op) error {
	began, w := time.Now(), s.phase.Load()
	defer func() { atomicMax(&s.longest[w], int64(time.Since(began))) }()
	if d := time.Duration(s.delay.Load()); d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return fmt.Errorf("%w: %w", registry.ErrUnavailable, ctx.Err())
		}
	}
	return s.Registry.Apply(ctx, ops)
}

func (s *slowed) Watch(ctx context.Context, f endpoint.Filter) (<-chan registry.Event, error) {
	return s.Registry.(registry.Watcher).Watch(ctx, f)
}

// window is a measurement phase: 0 warm-up or recovery (not counted), 1 unslowed, 2 slow.
type window int32

const (
	notCounted window = iota
	unslowed
	slow
)

// slowTally collects latencies per window.
type slowTally struct {
	mu    sync.Mutex
	lists [3][]time.Duration
	seen  [3][]time.Duration // from a write's call to its event at the watcher
}

func (t *slowTally) add(to *[3][]time.Duration, w window, d time.Duration) {
	t.mu.Lock()
	to[w] = append(to[w], d)
	t.mu.Unlock()
}

// lastWrite is an agent's latest acknowledged write of one key.
type lastWrite struct {
	weight int
	sent   time.Time
}

func slowBackendScenario(ctx context.Context, e *env, o options) ([]result, error) {
	e.scenario("slowbackend")
	b, err := e.backend(ctx)
	if err != nil {
		return nil, err
	}
	defer closeQuietly(b)
	var phase atomic.Int32 // a window
	sb := &slowed{Registry: b, phase: &phase}
	srv, err := startRegistrar(sb, func(c *registrar.Config) { c.MaxQueue = slowQueue })
	if err != nil {
		return nil, err
	}
	defer srv.stop()
	reg := srv.Registrar()
	conns, err := dialN(srv.Addr().String(), 3) // agents, the reader, the watcher
	if err != nil {
		return nil, err
	}
	defer closeAll(conns)
	api := registrarv1.NewRegistrarClient(conns[0])

	var tally slowTally
	var (
		mu      sync.Mutex
		last    = map[endpoint.Key]lastWrite{}
		sent    = map[endpoint.Key]lastWrite{} // the call under way per key, for the watcher
		refused [3]atomic.Int64                // per window
		acked   [3]atomic.Int64
		depth   [3]atomic.Int64 // the deepest queue per window
	)
	keyOf := func(a, k int) endpoint.Endpoint {
		return endpoint.Endpoint{Cluster: "east", Service: fmt.Sprintf("svc%d", a%50), Protocol: "http",
			Address: fmt.Sprintf("10.77.%d.%d", a, k+1), Port: 8080, Node: fmt.Sprintf("node-%d", a), Priority: 1}
	}

	// The watcher, on a connection of its own: from a write's call to its event.
	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	st, err := registrarv1.NewRegistrarClient(conns[2]).WatchEndpoints(wctx, &registrarv1.WatchEndpointsRequest{NodeName: "slow-watcher"})
	if err != nil {
		return nil, err
	}
	watchDone := make(chan error, 1)
	go func() {
		for {
			ev, err := st.Recv()
			if err != nil {
				watchDone <- err
				return
			}
			if ev.GetType() != registrarv1.EndpointEvent_ENDPOINT_ADDED && ev.GetType() != registrarv1.EndpointEvent_ENDPOINT_UPDATED {
				continue
			}
			got, err := endpoint.FromProtoUnchecked(ev.GetEndpoint())
			if err != nil {
				watchDone <- err
				return
			}
			now := time.Now()
			mu.Lock()
			w, ok := sent[got.Key()]
			mu.Unlock()
			if ok && w.weight == got.Weight {
				tally.add(&tally.seen, window(phase.Load()), now.Sub(w.sent))
			}
		}
	}()

	actx, stopAgents := context.WithCancel(ctx)
	defer stopAgents()
	var wg sync.WaitGroup
	errs := make(chan error, o.agents+2)
	// Agents: each rewrites its endpoints in turn, a new weight each time, and
	// retries a refused write with the agent's backoff (agent.Options: RetryMin
	// 500ms, RetryMax 30s), as the registrar client's caller does.
	for a := range o.agents {
		wg.Add(1)
		go func() {
			defer wg.Done()
			bo := backoff.Backoff{Min: 500 * time.Millisecond, Max: 30 * time.Second}
			// Agents are not in step: each starts at its own point of the period
			// (in step, their writes came as one burst of o.agents every period).
			if !backoff.Sleep(actx, slowWriteEvery*time.Duration(a)/time.Duration(o.agents)) {
				return
			}
			tick := time.NewTicker(slowWriteEvery)
			defer tick.Stop()
			for i := 0; ; i++ {
				ep := keyOf(a, i%slowKeysEach)
				ep.Weight = i + 1
				for {
					began := time.Now()
					mu.Lock()
					sent[ep.Key()] = lastWrite{weight: ep.Weight, sent: began}
					mu.Unlock()
					// Not ended by stopping the agents: a call under way then is
					// answered, and an acknowledged write must be counted.
					cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
					_, err := api.RegisterEndpoint(cctx, &registrarv1.RegisterEndpointRequest{Endpoints: []*registryv1.Endpoint{ep.ToProto()}})
					cancel()
					if err == nil {
						mu.Lock()
						last[ep.Key()] = lastWrite{weight: ep.Weight, sent: began}
						mu.Unlock()
						acked[phase.Load()].Add(1)
						bo.Reset()
						break
					}
					if status.Code(err) != codes.ResourceExhausted {
						errs <- fmt.Errorf("agent %d: %w", a, err)
						return
					}
					refused[phase.Load()].Add(1)
					if !backoff.Sleep(actx, bo.Next()) {
						return
					}
				}
				select {
				case <-actx.Done():
					return
				case <-tick.C:
				}
			}
		}()
	}
	// The reader: ListAllEndpoints of everything, on a connection of its own.
	wg.Add(1)
	go func() {
		defer wg.Done()
		lister := registrarv1.NewRegistrarClient(conns[1])
		for actx.Err() == nil {
			w := window(phase.Load())
			cctx, cancel := context.WithTimeout(actx, 5*time.Second)
			began := time.Now()
			_, err := lister.ListAllEndpoints(cctx, &registrarv1.ListAllEndpointsRequest{})
			took := time.Since(began)
			cancel()
			if actx.Err() != nil {
				return
			}
			if err != nil {
				errs <- fmt.Errorf("ListAllEndpoints: %w", err)
				return
			}
			if window(phase.Load()) == w {
				tally.add(&tally.lists, w, took)
			}
			backoff.Sleep(actx, slowListEvery)
		}
	}()
	// The queue's depth, sampled every millisecond.
	wg.Add(1)
	go func() {
		defer wg.Done()
		for actx.Err() == nil {
			atomicMax(&depth[phase.Load()], int64(reg.Pending()))
			backoff.Sleep(actx, time.Millisecond)
		}
	}()

	// Warm-up: every agent has written all its keys once and the queue drained.
	warm := time.Duration(slowKeysEach+5) * slowWriteEvery
	if !backoff.Sleep(ctx, warm) {
		return nil, ctx.Err()
	}
	if err := waitDrained(ctx, reg, 30*time.Second); err != nil {
		return nil, fmt.Errorf("warm-up: %w", err)
	}
	phase.Store(int32(unslowed))
	time.Sleep(slowWindow)
	sb.delay.Store(int64(slowLag))
	phase.Store(int32(slow))
	time.Sleep(slowWindow)
	sb.delay.Store(0)
	phase.Store(int32(notCounted))
	time.Sleep(3 * time.Second) // agents keep writing while the queue drains
	stopAgents()
	wg.Wait()
	stopped := time.Now()
	close(errs)
	if err := <-errs; err != nil {
		return nil, err
	}
	if err := waitDrained(ctx, reg, time.Minute); err != nil {
		return nil, fmt.Errorf("recovery: %w", err)
	}
	drained := time.Since(stopped)
	stopWatch()
	if err := <-watchDone; status.Code(err) != codes.Canceled && !errors.Is(err, context.Canceled) {
		return nil, fmt.Errorf("watch: %w", err)
	}

	// Lost: an acknowledged write whose value the backend does not hold.
	held, err := b.List(ctx, endpoint.Filter{})
	if err != nil {
		return nil, err
	}
	inBackend := make(map[endpoint.Key]int, len(held))
	for _, h := range held {
		inBackend[h.Key()] = h.Weight
	}
	// Weights only grow, so a backend value older than the last acknowledged
	// write is a lost write; none at all is too.
	lost := 0
	for k, w := range last {
		if got, ok := inBackend[k]; !ok || got < w.weight {
			lost++
			log.Printf("slowbackend: %s acknowledged with weight %d, backend holds %d (held: %v)", k, w.weight, got, ok)
		}
	}

	what := fmt.Sprintf("%d agents × %d endpoints, a write each per %s (refused: retried with the agent's backoff), 1 lister (every %s, all %d endpoints), 1 watcher; etcd, Apply slowed to %s for %s; MaxQueue %d",
		o.agents, slowKeysEach, slowWriteEvery, slowListEvery, o.agents*slowKeysEach, slowLag, slowWindow, slowQueue)
	p := func(d []time.Duration, q int) time.Duration {
		if len(d) == 0 {
			return 0
		}
		return percentile(d, q)
	}
	for w := range tally.lists {
		slices.Sort(tally.lists[w])
		slices.Sort(tally.seen[w])
	}
	l0, l1 := tally.lists[unslowed], tally.lists[slow]
	s0, s1 := tally.seen[unslowed], tally.seen[slow]
	ratio := func(a, b time.Duration) float64 {
		if a == 0 {
			return 0
		}
		return float64(b) / float64(a)
	}
	listRatio := ratio(p(l0, 99), p(l1, 99))
	watchRatio := ratio(p(s0, 99), p(s1, 99))
	maxDepth := max(depth[0].Load(), depth[1].Load(), depth[2].Load())
	return []result{
		{scenario: "Slow backend: ListAllEndpoints p50 / p99, unslowed window", setup: what,
			value: fmt.Sprintf("%s / %s (%d calls)", ms(p(l0, 50)), ms(p(l0, 99)), len(l0))},
		{scenario: "Slow backend: ListAllEndpoints p50 / p99, slow window (ratio of p99s)", setup: what,
			value: fmt.Sprintf("%s / %s (%d calls; %.2f×)", ms(p(l1, 50)), ms(p(l1, 99)), len(l1), listRatio),
			goal:  "p99 ≤ 1.5× unslowed", ok: ptr(len(l1) > 0 && listRatio <= 1.5)},
		{scenario: "Slow backend: write call → watcher has the event, p50 / p99, unslowed window", setup: what,
			value: fmt.Sprintf("%s / %s (%d events)", ms(p(s0, 50)), ms(p(s0, 99)), len(s0))},
		{scenario: "Slow backend: write call → watcher has the event, p50 / p99, slow window (ratio of p99s)", setup: what,
			value: fmt.Sprintf("%s / %s (%d events; %.2f×)", ms(p(s1, 50)), ms(p(s1, 99)), len(s1), watchRatio),
			goal:  "p99 ≤ 1.5× unslowed", ok: ptr(len(s1) > 0 && watchRatio <= 1.5)},
		{scenario: "Slow backend: deepest write queue (Pending, sampled every ms) vs. MaxQueue", setup: what,
			value: fmt.Sprintf("%d of %d (unslowed window: %d, its longest backend Apply %s)", maxDepth, slowQueue, depth[unslowed].Load(), ms(time.Duration(sb.longest[unslowed].Load()))),
			goal:  "≤ MaxQueue", ok: ptr(maxDepth <= slowQueue)},
		{scenario: "Slow backend: writes acknowledged / refused with RESOURCE_EXHAUSTED", setup: what,
			value: fmt.Sprintf("unslowed window: %d acknowledged, %d refused; slow window: %d acknowledged, %d refused; %d refused in all",
				acked[unslowed].Load(), refused[unslowed].Load(), acked[slow].Load(), refused[slow].Load(), refused[0].Load()+refused[1].Load()+refused[2].Load())},
		{scenario: "Slow backend: acknowledged writes lost after recovery", setup: what,
			value: fmt.Sprintf("%d of %d keys (agents wrote on for 3 s after the backend recovered; the queue was empty %s after they stopped)", lost, len(last), ms(drained)),
			goal:  "0", ok: ptr(lost == 0)},
	}, nil
}

// waitDrained waits until the registrar has persisted every accepted write.
func waitDrained(ctx context.Context, r *registrar.Registrar, within time.Duration) error {
	deadline := time.Now().Add(within)
	for r.Pending() > 0 {
		if time.Now().After(deadline) {
			return fmt.Errorf("%d writes still pending after %s", r.Pending(), within)
		}
		if !backoff.Sleep(ctx, 5*time.Millisecond) {
			return ctx.Err()
		}
	}
	return nil
}
