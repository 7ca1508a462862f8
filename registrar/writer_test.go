package registrar

import (
	"fmt"
	"testing"
	"time"

	"github.com/switchboard-mesh/switchboard/endpoint"
	registrarv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/registrar/v1"
	"github.com/switchboard-mesh/switchboard/registrar/token"
	"github.com/switchboard-mesh/switchboard/registry"
	"github.com/switchboard-mesh/switchboard/registry/memory"
)

func stored(t *testing.T, b registry.Registry) map[endpoint.Key]endpoint.Endpoint {
	t.Helper()
	eps, err := b.List(testCtx(t), endpoint.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[endpoint.Key]endpoint.Endpoint{}
	for _, e := range eps {
		out[e.Key()] = e
	}
	return out
}

func TestBatchCoalescesByKey(t *testing.T) {
	b := &faulty{Registry: memory.New()}
	defer b.Close()
	// Only a full batch of 3 keys flushes, so all writes below land in one batch.
	ts := startServer(t, Config{Backend: b, BatchInterval: time.Hour, BatchSize: 3})
	a, x, c := ep("east", "web", "10.0.0.1", 80), ep("east", "web", "10.0.0.2", 80), ep("east", "web", "10.0.0.3", 80)
	register(t, ts, a, x)
	x2 := x
	x2.Weight = 7
	register(t, ts, x2)
	unregister(t, ts, a)
	if n := b.applies.Load(); n != 0 {
		t.Fatalf("%d Applies before a full batch", n)
	}
	register(t, ts, c)
	eventually(t, "the batch is written", func() bool { return ts.Registrar().Pending() == 0 })
	batches := b.batchesCopy()
	if len(batches) != 1 || len(batches[0]) != 3 {
		t.Fatalf("batches = %v, want one batch of 3 ops (one per key)", batches)
	}
	got := stored(t, b)
	if len(got) != 2 || got[x.Key()].Weight != 7 || got[c.Key()].Key() != c.Key() {
		t.Fatalf("backend = %v, want x (weight 7) and c; a registered then unregistered nets out", got)
	}
}

func TestBatchSizeFlushesWithoutWaiting(t *testing.T) {
	b := &faulty{Registry: memory.New()}
	defer b.Close()
	ts := startServer(t, Config{Backend: b, BatchInterval: time.Hour, BatchSize: 50})
	for i := range 120 {
		register(t, ts, ep("east", "web", fmt.Sprintf("10.0.1.%d", i), 80))
	}
	// The interval never fires: only reaching the batch size can have flushed.
	eventually(t, "size-triggered flushes", func() bool { return len(stored(t, b)) >= 100 })
	for i, batch := range b.batchesCopy() {
		if len(batch) < 50 {
			t.Fatalf("batch %d has %d ops: flushed before reaching the batch size", i, len(batch))
		}
	}
	// Shutdown flushes what is left.
	if err := ts.stop(t); err != nil {
		t.Fatalf("graceful stop: %v", err)
	}
	if n := len(stored(t, b)); n != 120 {
		t.Fatalf("after shutdown the backend has %d of 120 endpoints", n)
	}
}

func TestIntervalFlushesAPartialBatch(t *testing.T) {
	b := &faulty{Registry: memory.New()}
	defer b.Close()
	ts := startServer(t, Config{Backend: b, BatchInterval: 20 * time.Millisecond, BatchSize: 1000})
	register(t, ts, ep("east", "web", "10.0.0.1", 80))
	eventually(t, "the lone write is persisted", func() bool { return len(stored(t, b)) == 1 })
}

// Accepted writes survive a backend outage: they are visible at once, retried with
// backoff, and persisted when the backend returns; a sync in between never makes
// them flap.
func TestOutageRetriesWithoutFlapping(t *testing.T) {
	m := memory.New()
	defer m.Close()
	b := &faulty{Registry: pollOnly{m}}
	b.failApply.Store(true)
	ts := startServer(t, Config{Backend: b, BatchInterval: 5 * time.Millisecond, SyncInterval: 5 * time.Millisecond})
	w := openWatch(t, ts.client, "")
	w.untilComplete(t)
	eps := make([]endpoint.Endpoint, 10)
	for i := range eps {
		eps[i] = ep("east", "web", fmt.Sprintf("10.0.2.%d", i), 80)
	}
	register(t, ts, eps...)
	for range eps {
		if ev := w.next(t); ev.GetType() != registrarv1.EndpointEvent_ENDPOINT_ADDED {
			t.Fatalf("got %v, want ADDED", ev)
		}
	}
	eventually(t, "several failed batches and polls", func() bool {
		return b.failed.Load() >= 3 && counterValue(t, ts, "registrar_write_batches_total") >= 3
	})
	w.quiet(t, 50*time.Millisecond) // polls of a backend without them did not remove them
	if n := ts.Registrar().Pending(); n != 10 {
		t.Fatalf("%d writes pending during the outage, want 10", n)
	}
	b.failApply.Store(false)
	eventually(t, "every write persisted", func() bool { return len(stored(t, m)) == 10 })
	eventually(t, "queue empty", func() bool { return ts.Registrar().Pending() == 0 })
	w.quiet(t, 50*time.Millisecond)
}

// A write the backend rejects as invalid can never succeed: it is dropped, and the
// snapshot goes back to what the backend holds.
func TestPermanentRejectionReverts(t *testing.T) {
	b := &faulty{Registry: memory.New()}
	defer b.Close()
	b.reject.Store(true)
	ts := startServer(t, Config{Backend: b, BatchInterval: 5 * time.Millisecond})
	w := openWatch(t, ts.client, "")
	w.untilComplete(t)
	a := ep("east", "web", "10.0.0.1", 80)
	register(t, ts, a)
	expectChange(t, w, registrarv1.EndpointEvent_ENDPOINT_ADDED, a)
	expectChange(t, w, registrarv1.EndpointEvent_ENDPOINT_REMOVED, a)
	if n := ts.Registrar().Pending(); n != 0 {
		t.Fatalf("%d writes still pending after a permanent rejection", n)
	}
}

// Events carry the persisted frontier: it stays below a write's version while the
// write waits, and passes it once the write is in the backend.
func TestEventsCarryThePersistedFrontier(t *testing.T) {
	b := &faulty{Registry: memory.New()}
	defer b.Close()
	b.failApply.Store(true)
	ts := startServer(t, Config{Backend: b, BatchInterval: 5 * time.Millisecond})
	w := openWatch(t, ts.client, "")
	w.untilComplete(t)
	a := ep("east", "web", "10.0.0.1", 80)
	register(t, ts, a)
	ev := expectChange(t, w, registrarv1.EndpointEvent_ENDPOINT_ADDED, a)
	v, p := mustToken(t, ev.GetVersion()), mustToken(t, ev.GetPersisted())
	if p.Epoch != v.Epoch || p.Seq >= v.Seq {
		t.Fatalf("event %s says persisted up to %s while its write waits", v, p)
	}
	b.failApply.Store(false)
	eventually(t, "a persisted", func() bool { return ts.Registrar().Pending() == 0 })
	c := ep("east", "web", "10.0.0.2", 80)
	register(t, ts, c)
	ev = expectChange(t, w, registrarv1.EndpointEvent_ENDPOINT_ADDED, c)
	if p := mustToken(t, ev.GetPersisted()); p.Seq < v.Seq {
		t.Fatalf("after a was persisted the frontier is %s, want at least %s", p, v)
	}
	// A new stream's SNAPSHOT_COMPLETE carries it too.
	eventually(t, "c persisted", func() bool { return ts.Registrar().Pending() == 0 })
	_, done := openWatch(t, ts.client, "").untilComplete(t)
	// The frontier names a sequence, without the state's digest.
	if p, v := mustToken(t, done.GetPersisted()), mustToken(t, done.GetVersion()); p != (token.Version{Epoch: v.Epoch, Seq: v.Seq}) {
		t.Fatalf("with nothing pending SNAPSHOT_COMPLETE says persisted %s, want its version %s", p, done.GetVersion())
	}
}

func mustToken(t *testing.T, s string) token.Version {
	t.Helper()
	v, err := token.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// A write that changes nothing visible (an agent's refresh) brings no change event;
// once it is persisted, watchers get a PROGRESS, an event of its own version after
// the write's, whose frontier covers it.
func TestProgressConfirmsWritesThatChangeNothing(t *testing.T) {
	b := &faulty{Registry: memory.New()}
	defer b.Close()
	ts := startServer(t, Config{Backend: b, BatchInterval: 5 * time.Millisecond})
	w := openWatch(t, ts.client, "")
	w.untilComplete(t)
	a := ep("east", "web", "10.0.0.1", 80)
	register(t, ts, a)
	added := mustToken(t, expectChange(t, w, registrarv1.EndpointEvent_ENDPOINT_ADDED, a).GetVersion())
	// a's ADDED went out before a was persisted; a PROGRESS says when it is.
	for ev := range w.progress {
		if mustToken(t, ev.GetPersisted()).Seq >= added.Seq {
			break
		}
	}

	b.failApply.Store(true)
	resp, err := ts.client.RegisterEndpoint(testCtx(t), &registrarv1.RegisterEndpointRequest{Endpoints: protos(a)})
	if err != nil {
		t.Fatal(err)
	}
	refresh := mustToken(t, resp.GetVersion())
	covers := func(ev *registrarv1.EndpointEvent) bool {
		return mustToken(t, ev.GetPersisted()).Seq >= refresh.Seq
	}
	// While the refresh waits, no PROGRESS may claim it persisted.
	deadline := time.After(200 * time.Millisecond)
	for waiting := true; waiting; {
		select {
		case ev := <-w.progress:
			if covers(ev) {
				t.Fatalf("PROGRESS %v covers the refresh at %s, which is not persisted", ev, refresh)
			}
		case <-deadline:
			waiting = false
		}
	}
	b.failApply.Store(false)
	for {
		select {
		case ev := <-w.progress:
			if v := mustToken(t, ev.GetVersion()); v.Epoch != refresh.Epoch || v.Seq <= refresh.Seq {
				t.Fatalf("PROGRESS at version %s, want one after the refresh's %s", v, refresh)
			}
			if covers(ev) {
				w.quiet(t, 50*time.Millisecond) // and no change event
				return
			}
		case <-time.After(10 * time.Second):
			t.Fatal("no PROGRESS covering the refresh within 10s of it being persistable")
		}
	}
}
