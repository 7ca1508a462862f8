package jetstream_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/internal/ccmref"
	"github.com/switchboard-mesh/switchboard/registry"
	sbjs "github.com/switchboard-mesh/switchboard/registry/jetstream"
)

const holdTTL = registry.MinHoldTTL

func held(e endpoint.Endpoint, id registry.HoldID) registry.Op {
	return registry.Op{Kind: registry.OpRegister, Endpoint: e, Hold: id}
}

func heldUnregister(e endpoint.Endpoint, id registry.HoldID) registry.Op {
	return registry.Op{Kind: registry.OpUnregister, Endpoint: e, Hold: id}
}

func mustHold(t *testing.T, ctx context.Context, r *registry.Front) registry.HoldID {
	t.Helper()
	id, err := r.Hold(ctx, holdTTL)
	if err != nil {
		t.Fatalf("Hold: %v", err)
	}
	return id
}

// ccmLookup reads the stream as CCM does, with the contract's entry filter (five
// wildcards after the prefix), and returns the addresses it found.
func ccmLookup(t *testing.T, nc *nats.Conn, cfg sbjs.StreamConfig) []string {
	t.Helper()
	got, err := ccmref.Lookup(testCtx(t, 10*time.Second), nc, cfg.Name, cfg.Prefix+".*.*.*.*.*", 100)
	if err != nil {
		t.Fatalf("CCM's lookup: %v", err)
	}
	out := make([]string, len(got))
	for i, e := range got {
		out[i] = e.Address
	}
	return out
}

func addresses(eps []endpoint.Endpoint) string {
	var out []string
	for _, e := range eps {
		out = append(out, e.Address)
	}
	return strings.Join(out, ",")
}

// TestDeadHoldReapedByAnotherDriver: driver A holds and registers three entries; B,
// another registry on the same stream, holds too and takes one of them over. A's
// hold ends and A closes: B's reaper removes A's other two entries within the hold's
// ttl and a few seconds, which Switchboard's readers and CCM's both see, and leaves
// the one it took over. Held entries have no expiry of their own here (the stream
// has no MaxAge), so only the reaper can remove them.
func TestDeadHoldReapedByAnotherDriver(t *testing.T) {
	ctx := testCtx(t, 60*time.Second)
	srv := startServer(t)
	ncA, ncB := connect(t, srv.ClientURL()), connect(t, srv.ClientURL())
	cfg := freshStream()
	a := openRegistry(t, ncA, sbjs.Options{Stream: cfg, Logger: testLogger(t)})
	reaped := prometheus.NewCounter(prometheus.CounterOpts{Name: "reaped"})
	b := openRegistry(t, ncB, sbjs.Options{Stream: cfg, Logger: testLogger(t), Reaped: reaped})
	idB := mustHold(t, ctx, b)
	ctxA, endA := context.WithCancel(ctx)
	defer endA()
	idA := mustHold(t, ctxA, a)

	e1, e2, e3 := ep("prod", "web", "http", "10.0.0.1", 80), ep("prod", "web", "http", "10.0.0.2", 80), ep("prod", "web", "http", "10.0.0.3", 80)
	// No TTL: CCM's reader takes a TTL for a number, and a held entry outliving its
	// own TTL is the conformance suite's to check.
	mustApply(t, ctx, a, held(e1, idA), held(e2, idA), held(e3, idA))
	mustApply(t, ctx, b, held(e3, idB)) // taken over while A lives
	ch, err := b.Watch(ctx, endpoint.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		nextEvent(t, ch, 5*time.Second)
	}
	expectEvent(t, ch, 5*time.Second, registry.Synced, endpoint.Key{})

	if got := mustList(t, ctx, b, endpoint.Filter{}); addresses(got) != "10.0.0.1,10.0.0.2,10.0.0.3" {
		t.Fatalf("List while A holds = %s, want all three", addresses(got))
	}
	if got := strings.Join(ccmLookup(t, ncB, cfg), ","); got != "10.0.0.1,10.0.0.2,10.0.0.3" {
		t.Fatalf("CCM's lookup while A holds = %s, want the three entries and no liveness subject", got)
	}

	endA()
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	ended := time.Now()
	gone := map[endpoint.Key]bool{}
	for len(gone) < 2 {
		ev := nextEvent(t, ch, holdTTL+10*time.Second)
		if ev.Type != registry.Removed || (ev.Endpoint.Key() != e1.Key() && ev.Endpoint.Key() != e2.Key()) {
			t.Fatalf("after A ended: %s %s, want e1 and e2 Removed", ev.Type, ev.Endpoint.Key())
		}
		gone[ev.Endpoint.Key()] = true
	}
	if took := time.Since(ended); took > holdTTL+5*time.Second {
		t.Errorf("reaped %s after A ended, want within the hold ttl and a few seconds", took)
	}
	got := mustList(t, ctx, b, endpoint.Filter{})
	if len(got) != 1 || !endpoint.Equal(got[0], e3) {
		t.Fatalf("List after the reap = %+v, want only the entry B took over, %+v", got, e3)
	}
	if got := strings.Join(ccmLookup(t, ncB, cfg), ","); got != "10.0.0.3" {
		t.Fatalf("CCM's lookup after the reap = %s, want only 10.0.0.3", got)
	}
	if n, m := sbjs.Reaped(b), testutil.ToFloat64(reaped); n != 2 || m != 2 {
		t.Errorf("Reaped() = %d, the metric %v, want 2", n, m)
	}
	expectQuiet(t, ch, time.Second)
}

// TestReaperAtStart: a driver whose first hold comes after another's liveness ended
// reaps that hold's entries when its reaper starts, with no marker to tell it.
func TestReaperAtStart(t *testing.T) {
	ctx := testCtx(t, 60*time.Second)
	srv := startServer(t)
	cfg := freshStream()
	a := openRegistry(t, connect(t, srv.ClientURL()), sbjs.Options{Stream: cfg})
	ctxA, endA := context.WithCancel(ctx)
	idA := mustHold(t, ctxA, a)
	e := ep("prod", "web", "http", "10.0.0.1", 80)
	mustApply(t, ctx, a, held(e, idA))
	endA()
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	ncB := connect(t, srv.ClientURL())
	js := newJS(t, ncB)
	liveness := sbjs.LivenessSubject(a, idA)
	eventually(t, holdTTL+5*time.Second, "A's liveness expires", func() bool {
		m := lastMsg(t, ctx, js, cfg.Name, liveness)
		return m == nil || m.Header.Get(jetstream.MarkerReasonHeader) != ""
	})
	time.Sleep(2 * cfg.MarkerTTL) // and its marker too
	b := openRegistry(t, ncB, sbjs.Options{Stream: cfg})
	if got := mustList(t, ctx, b, endpoint.Filter{}); len(got) != 1 {
		t.Fatalf("List before B holds = %+v, want A's entry: nothing reaps without a holding driver", got)
	}
	mustHold(t, ctx, b)
	eventually(t, 5*time.Second, "B's reaper removes A's entry", func() bool {
		return len(mustList(t, ctx, b, endpoint.Filter{})) == 0
	})
}

// TestHeldUnregister: a held unregister removes the hold's own entry, and leaves
// one another hold took over and one registered without a hold; a reaper's removal
// of an entry written since it read it is refused; an op under a hold
// the driver never gave out is refused with ErrNoHold and writes nothing.
func TestHeldUnregister(t *testing.T) {
	ctx := testCtx(t, 30*time.Second)
	srv := startServer(t)
	nc := connect(t, srv.ClientURL())
	js := newJS(t, nc)
	cfg := freshStream()
	a := openRegistry(t, nc, sbjs.Options{Stream: cfg})
	b := openRegistry(t, connect(t, srv.ClientURL()), sbjs.Options{Stream: cfg})
	idA, idB := mustHold(t, ctx, a), mustHold(t, ctx, b)
	own, taken, plain := ep("prod", "web", "http", "10.0.0.1", 80), ep("prod", "web", "http", "10.0.0.2", 80), ep("prod", "web", "http", "10.0.0.3", 80)
	mustApply(t, ctx, a, held(own, idA), held(taken, idA), registry.Register(plain))
	mustApply(t, ctx, b, held(taken, idB))
	mustApply(t, ctx, a, heldUnregister(own, idA), heldUnregister(taken, idA), heldUnregister(plain, idA))
	if got := mustList(t, ctx, a, endpoint.Filter{}); addresses(got) != "10.0.0.2,10.0.0.3" {
		t.Fatalf("List after A's held unregisters = %s, want the entry B took over and the unheld one", addresses(got))
	}
	subjects, _ := sbjs.NewSubjects(cfg.Prefix)
	if m := lastMsg(t, ctx, js, cfg.Name, subjects.For(taken.Key())); m == nil || m.Header.Get(sbjs.HoldHeader) != string(idB) {
		t.Fatalf("the entry B took over holds %+v, want B's registration", m)
	}
	m := lastMsg(t, ctx, js, cfg.Name, subjects.For(own.Key()))
	if m == nil || m.Header.Get(sbjs.OpHeader) != sbjs.OpUnregister {
		t.Fatalf("A's own entry holds %+v, want a removal", m)
	}

	// The reaper's removal, too, is refused once the entry changed since it read it.
	m = lastMsg(t, ctx, js, cfg.Name, subjects.For(taken.Key()))
	mustApply(t, ctx, b, held(taken, idB))
	if n, err := sbjs.ReapIfStill(ctx, b, subjects.For(taken.Key()), m.Sequence); n != 0 || err != nil {
		t.Fatalf("a reap of an entry written since it was read removed %d (%v), want none, no error", n, err)
	}
	if got := mustList(t, ctx, a, endpoint.Filter{}); len(got) != 2 {
		t.Fatalf("a stale reap removed an entry: List = %s", addresses(got))
	}

	err := a.Apply(ctx, []registry.Op{held(ep("prod", "web", "http", "10.0.0.9", 80), "0123456789abcdef0123456789abcdef")})
	if !errors.Is(err, registry.ErrNoHold) {
		t.Fatalf("Apply under an unknown hold = %v, want ErrNoHold", err)
	}
	if err := a.Apply(ctx, []registry.Op{held(own, idB)}); !errors.Is(err, registry.ErrNoHold) {
		t.Fatalf("Apply under another driver's hold = %v, want ErrNoHold", err)
	}
	if got := mustList(t, ctx, a, endpoint.Filter{}); len(got) != 2 {
		t.Fatalf("a refused batch wrote: List = %s", addresses(got))
	}
}

// TestHeldWireForm: a held registration carries its owner and no Nats-TTL, and the
// same payload as one without a hold, so its TTL reads back as registered; the
// liveness message carries the hold's ttl; an entry without an owner, as every writer
// wrote them before holds, reads back unchanged and no reap touches it.
func TestHeldWireForm(t *testing.T) {
	ctx := testCtx(t, 30*time.Second)
	srv := startServer(t)
	nc := connect(t, srv.ClientURL())
	js := newJS(t, nc)
	cfg := freshStream()
	r := openRegistry(t, nc, sbjs.Options{Stream: cfg})
	subjects, _ := sbjs.NewSubjects(cfg.Prefix)

	foreign := ep("prod", "web", "http", "10.0.0.5", 80)
	foreign.TTL = endpoint.Never
	foreignSubject := subjects.For(foreign.Key())
	publishRaw(t, ctx, js, foreignSubject, nats.Header{"Nats-Rollup": {"sub"}, "Nats-TTL": {"never"}},
		`{"cluster":"prod","service":"web","protocol":"http","address":"10.0.0.5","port":80,"priority":1,"ttl":"never"}`)
	before := lastMsg(t, ctx, js, cfg.Name, foreignSubject)

	ctxH, endH := context.WithCancel(ctx)
	id := mustHold(t, ctxH, r)
	if m := lastMsg(t, ctx, js, cfg.Name, sbjs.LivenessSubject(r, id)); m == nil || m.Header.Get("Nats-TTL") != "3s" {
		t.Fatalf("liveness message %+v, want Nats-TTL 3s", m)
	}
	e := ep("prod", "web", "http", "10.0.0.1", 80)
	e.TTL = endpoint.TTL(30 * time.Second)
	plain := e
	plain.Address = "10.0.0.2"
	mustApply(t, ctx, r, held(e, id), registry.Register(plain))
	m := lastMsg(t, ctx, js, cfg.Name, subjects.For(e.Key()))
	if m.Header.Get(sbjs.HoldHeader) != string(id) || m.Header.Get("Nats-TTL") != "" || m.Header.Get("Nats-Rollup") != "sub" {
		t.Errorf("held registration headers %v, want the owner, rollup, and no Nats-TTL", m.Header)
	}
	p := lastMsg(t, ctx, js, cfg.Name, subjects.For(plain.Key()))
	if want := strings.Replace(string(p.Data), "10.0.0.2", "10.0.0.1", 1); string(m.Data) != want {
		t.Errorf("held payload %s, want %s, as without a hold", m.Data, want)
	}
	for _, rc := range readCases {
		got := mustList(t, ctx, openReader(t, nc, sbjs.Options{Stream: cfg}, rc), endpoint.Filter{Service: "web"})
		if len(got) != 3 || !endpoint.Equal(got[0], e) || !endpoint.Equal(got[2], foreign) {
			t.Fatalf("%s: List = %+v, want %+v and %+v among them as written", rc.name, got, e, foreign)
		}
	}

	endH() // the hold's entry is reaped; the entry without an owner is not
	eventually(t, holdTTL+5*time.Second, "the ended hold's entry is reaped", func() bool {
		return len(mustList(t, ctx, r, endpoint.Filter{})) == 2
	})
	if after := lastMsg(t, ctx, js, cfg.Name, foreignSubject); after.Sequence != before.Sequence {
		t.Errorf("the reap wrote over an entry without an owner (sequence %d, was %d)", after.Sequence, before.Sequence)
	}
}
