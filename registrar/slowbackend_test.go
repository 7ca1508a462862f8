package registrar

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/switchboard-mesh/switchboard/endpoint"
	registrarv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/registrar/v1"
	"github.com/switchboard-mesh/switchboard/registry"
	"github.com/switchboard-mesh/switchboard/registry/memory"
)

// slowBackend wraps a real backend and, while delay is set, makes every Apply take
// that long before it writes: a gray failure, the backend up but slow. It keeps the
// backend's change feed and honours the Apply's context.
type slowBackend struct {
	registry.Registry
	delay   atomic.Int64 // nanoseconds; 0: as fast as the backend
	applies atomic.Int64
	slowed  atomic.Int64 // Applies that were delayed
}

// waitApply holds an Apply up for d, or fails it as a backend that is away does when
// ctx ends first.
func waitApply(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%w: %w", registry.ErrUnavailable, ctx.Err())
	}
}

func (b *slowBackend) Apply(ctx context.Context, ops []registry.Op) error {
	b.applies.Add(1)
	if d := time.Duration(b.delay.Load()); d > 0 {
		b.slowed.Add(1)
		if err := waitApply(ctx, d); err != nil {
			return err
		}
	}
	return b.Registry.Apply(ctx, ops)
}

func (b *slowBackend) Watch(ctx context.Context, f endpoint.Filter) (<-chan registry.Event, error) {
	return b.Registry.(registry.Watcher).Watch(ctx, f)
}

// A registrar whose backend takes 2 s per write keeps its write queue within
// MaxQueue, refuses what does not fit with RESOURCE_EXHAUSTED at once (not after
// the backend's latency), keeps serving ListAllEndpoints and watches from its
// snapshot, which holds every accepted write at once, and once the backend is
// fast again persists every write it acknowledged.
func TestSlowBackendShedsWritesAndKeepsServingReads(t *testing.T) {
	const (
		maxQueue    = 40
		backendLag  = 2 * time.Second
		slowFor     = 7 * time.Second
		rpcDeadline = time.Second // a correctness bound: well under backendLag
		writers     = 4
	)
	inner := memory.New()
	defer inner.Close()
	b := &slowBackend{Registry: inner}
	ts := startServer(t, Config{Backend: b, MaxQueue: maxQueue, BatchInterval: 10 * time.Millisecond, BatchSize: 10,
		BackendTimeout: 10 * time.Second, DrainTimeout: 10 * time.Second})
	r := ts.Registrar()

	// A watcher on a connection of its own, reading everything.
	conn, err := grpc.NewClient(ts.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	w := openWatch(t, registrarv1.NewRegistrarClient(conn), "")
	if _, done := w.untilComplete(t); done == nil {
		t.Fatal("no SNAPSHOT_COMPLETE")
	}
	var seenMu sync.Mutex
	seen := map[endpoint.Key]time.Time{} // when the watcher got each ADDED
	go func() {
		for ev := range w.events {
			if ev.GetType() == registrarv1.EndpointEvent_ENDPOINT_ADDED {
				seenMu.Lock()
				seen[keyOf(ev.GetEndpoint())] = time.Now()
				seenMu.Unlock()
			}
		}
	}()

	b.delay.Store(int64(backendLag))
	ctx, stop := context.WithTimeout(context.Background(), slowFor)
	defer stop()
	var (
		mu        sync.Mutex
		acked     = map[endpoint.Key]time.Time{} // when each acknowledged write was answered
		refused   = map[endpoint.Key]bool{}
		exhausted atomic.Int64
		maxDepth  atomic.Int64
		failures  = make(chan string, 100)
		wg        sync.WaitGroup
	)
	fail := func(format string, args ...any) {
		select {
		case failures <- fmt.Sprintf(format, args...):
		default:
		}
	}
	// Agents: each keeps registering new endpoints, every call bounded by rpcDeadline.
	for g := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				e := ep("east", "web", fmt.Sprintf("10.%d.%d.%d", g, i/250, i%250+1), 80)
				cctx, cancel := context.WithTimeout(context.Background(), rpcDeadline)
				began := time.Now()
				_, err := ts.client.RegisterEndpoint(cctx, &registrarv1.RegisterEndpointRequest{Endpoints: protos(e)})
				took := time.Since(began)
				cancel()
				mu.Lock()
				switch status.Code(err) {
				case codes.OK:
					acked[e.Key()] = time.Now()
				case codes.ResourceExhausted:
					exhausted.Add(1)
					refused[e.Key()] = true
				default:
					fail("RegisterEndpoint after %s: %v", took, err)
				}
				mu.Unlock()
				if took >= rpcDeadline {
					fail("RegisterEndpoint took %s (%v), want under %s", took, status.Code(err), rpcDeadline)
				}
				time.Sleep(2 * time.Millisecond)
			}
		}()
	}
	// The queue's depth, by Pending and by the registrar's own gauge.
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			var m dto.Metric
			if err := r.m.queue.Write(&m); err != nil {
				fail("queue gauge: %v", err)
				return
			}
			atomicMax(&maxDepth, max(int64(r.Pending()), int64(m.GetGauge().GetValue())))
			time.Sleep(time.Millisecond)
		}
	}()
	// A reader: every listing is answered within the deadline and holds every write
	// acknowledged before it was asked for.
	var lists atomic.Int64
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			mu.Lock()
			want := make([]endpoint.Key, 0, len(acked))
			for k := range acked {
				want = append(want, k)
			}
			mu.Unlock()
			cctx, cancel := context.WithTimeout(context.Background(), rpcDeadline)
			began := time.Now()
			resp, err := ts.client.ListAllEndpoints(cctx, &registrarv1.ListAllEndpointsRequest{})
			took := time.Since(began)
			cancel()
			if err != nil || took >= rpcDeadline {
				fail("ListAllEndpoints took %s: %v", took, err)
				return
			}
			lists.Add(1)
			got := map[endpoint.Key]bool{}
			for _, p := range resp.GetEndpoints() {
				got[keyOf(p)] = true
			}
			for _, k := range want {
				if !got[k] {
					fail("ListAllEndpoints lacks %s, acknowledged before the call", k)
					return
				}
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	wg.Wait()
	close(failures)
	for f := range failures {
		t.Error(f)
	}
	if t.Failed() {
		b.delay.Store(0)
		t.FailNow()
	}

	mu.Lock()
	nAcked, nRefused := len(acked), len(refused)
	mu.Unlock()
	t.Logf("slow window %s: %d writes acknowledged, %d refused (RESOURCE_EXHAUSTED), max queue depth %d of %d, %d listings, %d Applies delayed",
		slowFor, nAcked, nRefused, maxDepth.Load(), maxQueue, lists.Load(), b.slowed.Load())
	// (a) The queue stayed within its bound, and (b) was filled: writes were refused.
	if d := maxDepth.Load(); d > maxQueue {
		t.Errorf("write queue reached %d, bound %d", d, maxQueue)
	}
	if exhausted.Load() == 0 || nAcked < maxQueue {
		t.Fatalf("%d writes refused, %d acknowledged: the slow backend never filled the queue of %d", exhausted.Load(), nAcked, maxQueue)
	}
	if lists.Load() < 10 {
		t.Errorf("only %d listings answered in %s", lists.Load(), slowFor)
	}
	// (c) The watcher has every acknowledged write, while the backend is still
	// slow: from the snapshot, not the backend.
	deadline := time.Now().Add(rpcDeadline)
	for {
		seenMu.Lock()
		missing := 0
		mu.Lock()
		for k := range acked {
			if _, ok := seen[k]; !ok {
				missing++
			}
		}
		mu.Unlock()
		seenMu.Unlock()
		if missing == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the watcher lacks %d of %d acknowledged writes %s after the writes stopped", missing, nAcked, rpcDeadline)
		}
		time.Sleep(10 * time.Millisecond)
	}
	var worst time.Duration
	seenMu.Lock()
	mu.Lock()
	for k, at := range acked {
		worst = max(worst, seen[k].Sub(at))
	}
	mu.Unlock()
	seenMu.Unlock()
	if worst >= rpcDeadline {
		t.Errorf("a watcher got an acknowledged write %s after its acknowledgement, want under %s", worst, rpcDeadline)
	}
	if r.Pending() == 0 {
		t.Error("nothing pending at the end of the slow window: the backend was not the bottleneck")
	}

	// (d) The backend is fast again: everything acknowledged is persisted, and
	// nothing refused is.
	b.delay.Store(0)
	deadline = time.Now().Add(10 * time.Second)
	for r.Pending() > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d writes still pending 10s after the backend recovered", r.Pending())
		}
		time.Sleep(10 * time.Millisecond)
	}
	held := stored(t, inner)
	lost := 0
	for k := range acked {
		if _, ok := held[k]; !ok {
			lost++
		}
	}
	if lost > 0 {
		t.Errorf("%d of %d acknowledged writes are not in the backend after recovery", lost, nAcked)
	}
	for k := range refused {
		if _, ok := held[k]; ok {
			t.Errorf("refused write %s is in the backend", k)
		}
	}
	if len(held) != nAcked {
		t.Errorf("backend holds %d endpoints, want the %d acknowledged", len(held), nAcked)
	}
	resp, err := ts.client.ListAllEndpoints(testCtx(t), &registrarv1.ListAllEndpointsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(resp.GetEndpoints()); n != nAcked {
		t.Errorf("snapshot holds %d endpoints after recovery, want the %d acknowledged", n, nAcked)
	}
}

// atomicMax raises a to v if v is larger.
func atomicMax(a *atomic.Int64, v int64) {
	for {
		cur := a.Load()
		if v <= cur || a.CompareAndSwap(cur, v) {
			return
		}
	}
}

// perOpBackend takes perOp for every op of an Apply, after blocking every Apply while
// stalled (both honour the Apply's context): a backend whose writes cost by the op,
// as a KV stream's publishes or an etcd transaction's puts do.
type perOpBackend struct {
	registry.Registry
	perOp   time.Duration
	stalled atomic.Bool
	largest atomic.Int64 // the most ops one Apply that succeeded carried
}

func (b *perOpBackend) Apply(ctx context.Context, ops []registry.Op) error {
	wait := time.Duration(len(ops)) * b.perOp
	if b.stalled.Load() {
		wait = time.Hour
	}
	if err := waitApply(ctx, wait); err != nil {
		return err
	}
	if err := b.Registry.Apply(ctx, ops); err != nil {
		return err
	}
	for n := int64(len(ops)); ; {
		old := b.largest.Load()
		if n <= old || b.largest.CompareAndSwap(old, n) {
			break
		}
	}
	return nil
}

func (b *perOpBackend) Watch(ctx context.Context, f endpoint.Filter) (<-chan registry.Event, error) {
	return b.Registry.(registry.Watcher).Watch(ctx, f)
}

// TestWritesQueuedBehindAStalledBackendGetThrough: writes pile up while the backend is
// stalled; once it answers again, at a cost per op, every one of them is persisted,
// although all of them in one Apply would take longer than BackendTimeout. (A batch
// that took every waiting write failed on its timeout, was retried whole and grew.)
func TestWritesQueuedBehindAStalledBackendGetThrough(t *testing.T) {
	const (
		queued  = 2000
		perOp   = time.Millisecond
		timeout = 300 * time.Millisecond // a whole queue is 2 s of Apply
	)
	inner := memory.New()
	defer inner.Close()
	b := &perOpBackend{Registry: inner, perOp: perOp}
	ts := startServer(t, Config{Backend: b, MaxQueue: 2 * queued, BatchInterval: 10 * time.Millisecond, BatchSize: 10,
		BackendTimeout: timeout, DrainTimeout: time.Second})
	waitReady(t, ts.Registrar())
	b.stalled.Store(true)
	ctx := testCtx(t)
	for i := 0; i < queued; i += 100 {
		var eps []endpoint.Endpoint
		for j := i; j < i+100; j++ {
			eps = append(eps, ep("east", "web", fmt.Sprintf("10.1.%d.%d", j/250, j%250+1), 80))
		}
		if _, err := ts.client.RegisterEndpoint(ctx, &registrarv1.RegisterEndpointRequest{Endpoints: protos(eps...)}); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(2 * timeout) // a batch or two fails on its timeout meanwhile
	b.stalled.Store(false)
	deadline := time.Now().Add(20 * time.Second)
	for {
		got, err := inner.List(context.Background(), endpoint.Filter{})
		if err != nil {
			t.Fatal(err)
		}
		if len(got) == queued {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d acknowledged writes in the backend 20 s after it answered again (largest Apply that succeeded: %d ops)", len(got), queued, b.largest.Load())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if n := b.largest.Load(); time.Duration(n)*perOp >= timeout {
		t.Errorf("an Apply of %d ops succeeded, %s at %s per op: over the timeout", n, time.Duration(n)*perOp, perOp)
	}
}
