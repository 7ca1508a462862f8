package etcd

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/registry"
)

// A re-register that changes nothing sends nothing; one that changes any field,
// TTL included, is Updated.
func TestWatchSkipsNoopRefresh(t *testing.T) {
	r := open(t)
	ctx := testCtx(t)
	a := withTTL(ep("prod", "web", "http", "10.0.0.1", 80), 30*time.Second)
	mustApply(t, r, registry.Register(a))
	ch, err := r.Watch(ctx, endpoint.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	expectEvents(t, ch, added(a), synced())
	mustApply(t, r, registry.Register(a))
	expectQuiet(t, ch)
	a2 := withTTL(a, time.Minute)
	mustApply(t, r, registry.Register(a2))
	expectEvents(t, ch, updated(a2))
}

// keyFields is e with its key fields only.
func keyFields(e endpoint.Endpoint) endpoint.Endpoint {
	return e.Key().Endpoint()
}

// Another writer's encoding of the same endpoint (here with a leading space) is no
// change either, and a removal carries the endpoint as last sent: the watcher keeps
// no endpoints, so both come from the value etcd hands it with each event.
func TestWatchComparesWithPreviousValue(t *testing.T) {
	r := open(t)
	ctx := testCtx(t)
	a := ep("prod", "web", "http", "10.0.0.1", 80)
	a.Node, a.Weight, a.Annotations = "n1", 7, map[string]string{"zone": "a"}
	mustApply(t, r, registry.Register(a))
	ch, err := r.Watch(ctx, endpoint.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	expectEvents(t, ch, added(a), synced())
	key := r.layout.key(a.Key())
	got, err := r.client.Get(ctx, key)
	if err != nil || len(got.Kvs) != 1 {
		t.Fatalf("get %s: %v, %v", key, got, err)
	}
	if _, err := r.client.Put(ctx, key, " "+string(got.Kvs[0].Value)); err != nil {
		t.Fatal(err)
	}
	expectQuiet(t, ch)
	if _, err := r.client.Delete(ctx, key); err != nil {
		t.Fatal(err)
	}
	expectEvents(t, ch, removed(a))
}

// fed is a driver whose watch sends what a test puts on its feed, to see what a
// registry.Front makes of a watcher's events.
type fed struct{ feed chan registry.Event }

func (fed) Apply(context.Context, []registry.Op) error                         { return nil }
func (fed) List(context.Context, endpoint.Filter) ([]endpoint.Endpoint, error) { return nil, nil }
func (fed) Close() error                                                       { return nil }

func (d fed) Watch(ctx context.Context, _ endpoint.Filter) (<-chan registry.Event, error) {
	out := make(chan registry.Event)
	go func() {
		defer close(out)
		for {
			select {
			case ev := <-d.feed:
				select {
				case out <- ev:
				case <-ctx.Done():
					return
				}
			case <-ctx.Done():
				return
			}
		}
	}()
	return out, nil
}

// Without the previous value (etcd omits it once that revision is compacted), a PUT
// is compared with what the caller holds, and a removal carries the key's fields.
// The watcher sends every change; the Front it is used through drops those that
// change nothing.
func TestChangeWithoutPreviousValue(t *testing.T) {
	r := open(t)
	ctx := testCtx(t)
	a := ep("prod", "web", "http", "10.0.0.1", 80)
	a.Node = "n1"
	value, err := json.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	key := []byte(r.layout.key(a.Key()))
	w := &watcher{r: r.driver}
	d := fed{feed: make(chan registry.Event)}
	front := registry.NewFront("etcd", d)
	defer front.Close()
	ch, err := front.Watch(ctx, endpoint.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	send := func(e registry.Event, ok bool) {
		t.Helper()
		if !ok {
			t.Fatal("the watcher sent nothing")
		}
		d.feed <- e
	}
	send(added(a), true)
	send(synced(), true)
	expectEvents(t, ch, added(a), synced())
	put := func(v []byte) *clientv3.Event {
		return &clientv3.Event{Type: clientv3.EventTypePut, Kv: &mvccpb.KeyValue{Key: key, Value: v, CreateRevision: 1, ModRevision: 2}}
	}
	send(w.change(put(value)))
	expectQuiet(t, ch) // the same value again
	a2 := a
	a2.Weight = 3
	value2, err := json.Marshal(a2)
	if err != nil {
		t.Fatal(err)
	}
	send(w.change(put(value2)))
	expectEvents(t, ch, updated(a2))
	del := &clientv3.Event{Type: clientv3.EventTypeDelete, Kv: &mvccpb.KeyValue{Key: key}}
	send(w.change(del))
	expectEvents(t, ch, removed(keyFields(a)))
	// After the delete the caller holds nothing: a second one sends nothing.
	send(w.change(del))
	expectQuiet(t, ch)
}

// A value under the prefix that is not a valid endpoint counts as absent: List
// skips it and a watcher that had the endpoint sees it Removed.
func TestCorruptValueCountsAsAbsent(t *testing.T) {
	r := open(t)
	ctx := testCtx(t)
	a := ep("prod", "web", "http", "10.0.0.1", 80)
	b := ep("prod", "web", "http", "10.0.0.2", 80)
	mustApply(t, r, registry.Register(a), registry.Register(b))
	ch, err := r.Watch(ctx, endpoint.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	expectEvents(t, ch, added(a), added(b), synced())
	if _, err := r.client.Put(ctx, r.layout.key(a.Key()), "not json"); err != nil {
		t.Fatal(err)
	}
	if _, err := r.client.Put(ctx, r.Prefix()+"stray", "x"); err != nil {
		t.Fatal(err)
	}
	expectEvents(t, ch, removed(a))
	got, err := r.List(ctx, endpoint.Filter{})
	if err != nil || len(got) != 1 || got[0].Key() != b.Key() {
		t.Fatalf("List = %v, %v; want only b", got, err)
	}
}

// modRevision returns the revision that last wrote e. The watcher's last seen
// revision is its last event's, not the store's: other tests' leases expire on the
// shared server too.
func modRevision(t *testing.T, r reg, e endpoint.Endpoint) int64 {
	t.Helper()
	resp, err := r.client.Get(testCtx(t), r.layout.key(e.Key()))
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("Get %s: %v, %v", e.Key(), resp, err)
	}
	return resp.Kvs[0].ModRevision
}

// watchOpen is one call of the beforeWatch hook.
type watchOpen struct {
	rev  int64
	drop context.CancelFunc
}

// gatedHooks records every watch the loop opens and, while gated, holds the loop
// before it opens the next one: the state of a watcher whose connection is down.
type gatedHooks struct {
	opens    chan watchOpen
	gated    atomic.Bool
	release  chan struct{}
	resyncs  atomic.Int32
	lastSync atomic.Int64
}

func installHooks(t *testing.T, r reg) *gatedHooks {
	h := &gatedHooks{opens: make(chan watchOpen, 16), release: make(chan struct{})}
	stop := make(chan struct{})
	// Runs before the registry's cleanup (cleanups are LIFO), so a failed test
	// never leaves the loop held.
	t.Cleanup(func() { close(stop) })
	r.hooks.beforeWatch = func(rev int64, drop context.CancelFunc) {
		// Whether to hold is decided before the open is announced: the test may
		// lift the gate right after it has seen the open, and then sends release,
		// which this open must take, however late this goroutine runs on.
		gated := h.gated.Load()
		h.opens <- watchOpen{rev, drop}
		if gated {
			select {
			case <-h.release:
			case <-stop:
			}
		}
	}
	r.hooks.resynced = func(rev int64) {
		h.lastSync.Store(rev)
		h.resyncs.Add(1)
	}
	return h
}

// open lets the held watch loop go on.
func (h *gatedHooks) open(t *testing.T) {
	t.Helper()
	h.gated.Store(false)
	select {
	case h.release <- struct{}{}:
	case <-time.After(wait):
		t.Fatal("the watch loop is not held before a watch")
	}
}

func (h *gatedHooks) next(t *testing.T) watchOpen {
	t.Helper()
	select {
	case o := <-h.opens:
		return o
	case <-time.After(wait):
		t.Fatal("the watch loop did not open a watch")
	}
	return watchOpen{}
}

// TestWatchResumeAndCompaction drops a watcher's connection and holds it down while
// the range changes. Resumed, it must replay exactly the changes it missed from its
// last revision. Then, with the missed revisions compacted, it must re-read and send
// only the net differences — nothing lost, nothing twice, no transient entries.
func TestWatchResumeAndCompaction(t *testing.T) {
	r := open(t)
	h := installHooks(t, r)
	ctx := testCtx(t)
	a := ep("prod", "web", "http", "10.0.0.1", 80)
	c := ep("prod", "web", "http", "10.0.0.3", 80)
	mustApply(t, r, registry.Register(a), registry.Register(c))
	ch, err := r.Watch(ctx, endpoint.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	expectEvents(t, ch, added(a), added(c), synced())
	first := h.next(t)
	d := ep("prod", "db", "tcp", "10.0.0.4", 5432)
	mustApply(t, r, registry.Register(d))
	expectEvents(t, ch, added(d))
	lastSeen := modRevision(t, r, d)

	// 1. Disconnect, change things, reconnect: resume replays the history.
	h.gated.Store(true)
	first.drop()
	second := h.next(t)
	if second.rev != lastSeen+1 {
		t.Fatalf("resumed from revision %d, want %d (one after the last seen)", second.rev, lastSeen+1)
	}
	g := ep("prod", "web", "grpc", "10.0.0.7", 9090)
	g2 := g
	g2.Weight = 5
	hh := ep("prod", "web", "grpc", "10.0.0.8", 9090)
	mustApply(t, r, registry.Register(g))
	mustApply(t, r, registry.Register(g2))
	mustApply(t, r, registry.Unregister(g))
	mustApply(t, r, registry.Register(hh))
	h.open(t)
	expectEvents(t, ch, added(g), updated(g2), removed(g2), added(hh))
	expectQuiet(t, ch)
	if n := h.resyncs.Load(); n != 0 {
		t.Fatalf("plain resume re-read the range %d times, want 0", n)
	}

	// 2. Disconnect, change things, compact the missed revisions, reconnect.
	lastSeen = modRevision(t, r, hh)
	h.gated.Store(true)
	second.drop()
	if o := h.next(t); o.rev != lastSeen+1 {
		t.Fatalf("resumed from revision %d, want %d", o.rev, lastSeen+1)
	}
	a2 := a
	a2.Priority = 9
	b := ep("prod", "web", "http", "10.0.0.2", 80)
	e := ep("prod", "web", "http", "10.0.0.5", 80)
	mustApply(t, r, registry.Register(a2), registry.Register(b))
	mustApply(t, r, registry.Unregister(c))
	mustApply(t, r, registry.Register(e))
	mustApply(t, r, registry.Unregister(e))
	mustApply(t, r, registry.Register(d)) // unchanged
	now := revision(t, r)
	if _, err := r.client.Compact(ctx, now, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
	h.open(t)
	// c's last value is compacted away: its removal carries its key fields.
	expectEvents(t, ch, removed(keyFields(c)), updated(a2), added(b))
	if n := h.resyncs.Load(); n != 1 {
		t.Fatalf("compaction caused %d re-reads, want 1", n)
	}
	if rev := h.lastSync.Load(); rev < now {
		t.Fatalf("re-read at revision %d, before the compaction at %d", rev, now)
	}
	if o := h.next(t); o.rev != h.lastSync.Load()+1 {
		t.Fatalf("after the re-read the watch resumed from %d, want %d", o.rev, h.lastSync.Load()+1)
	}

	// 3. The watch is live again.
	f := ep("prod", "web", "http", "10.0.0.6", 80)
	mustApply(t, r, registry.Register(f))
	expectEvents(t, ch, added(f))
	expectQuiet(t, ch)
}

// A watcher whose consumer is slow while the connection is up loses nothing: etcd
// holds the events, and they arrive in order once the consumer reads.
func TestSlowConsumerLosesNothing(t *testing.T) {
	r := open(t)
	ctx := testCtx(t)
	ch, err := r.Watch(ctx, endpoint.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	expectEvents(t, ch, synced())
	ops := registers(300)
	for _, op := range ops {
		mustApply(t, r, op)
	}
	for i, op := range ops {
		if ev := next(t, ch); ev.Type != registry.Added || ev.Endpoint.Key() != op.Endpoint.Key() {
			t.Fatalf("event %d = %s %s, want added %s", i, ev.Type, ev.Endpoint.Key(), op.Endpoint.Key())
		}
	}
	expectQuiet(t, ch)
}
