package view

import (
	"fmt"
	"slices"
	"testing"

	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/internal/wire"
	"github.com/switchboard-mesh/switchboard/registry"
)

func newTestView(t *testing.T) (*View, *int) {
	t.Helper()
	s := New(Config{Epoch: 1, History: 64, MaxQueue: 100})
	events := new(int)
	last := uint64(0)
	s.onChange = func() { // count changes; PROGRESS events change nothing
		for ; last < s.seq; last++ {
			if ev, _ := s.eventAt(last + 1); ev.Type != wire.Progress {
				*events++
			}
		}
	}
	return s, events
}

// A full read that began before a write was confirmed must not undo that write,
// however late its result arrives; a read that began after it is authoritative.
func TestFullReadOlderThanAWriteIsIgnoredForThatKey(t *testing.T) {
	s, events := newTestView(t)
	a := ep("east", "web", "10.0.0.1", 80)
	s.EndFull(s.BeginFull(), nil)

	stale := s.BeginFull() // a List starts; it will not see a
	if _, err := s.Accept([]registry.Op{registry.Register(a)}, nil, nil); err != nil {
		t.Fatal(err)
	}
	batch := s.TakeBatch(0)
	s.BatchDone(batch, nil, false) // a is now in the backend and no longer pending
	s.EndFull(stale, nil)          // the old List result arrives, without a
	if s.entries[a.Key()] == nil || *events != 1 {
		t.Fatalf("stale full read removed a confirmed write (entries %v, %d events)", s.entries, *events)
	}

	fresh := s.BeginFull()
	s.EndFull(fresh, []endpoint.Endpoint{a})
	if *events != 1 {
		t.Fatalf("a full read agreeing with the snapshot emitted events: %d", *events)
	}
	gone := s.BeginFull() // someone deleted a directly in the backend
	s.EndFull(gone, nil)
	if s.entries[a.Key()] != nil || *events != 2 {
		t.Fatalf("a fresh full read without a did not remove it (%d events)", *events)
	}
	if len(s.stamps) != 0 || len(s.syncs) != 0 {
		t.Fatalf("bookkeeping leaks: %d stamps, %d syncs", len(s.stamps), len(s.syncs))
	}
}

func TestWatchEventNewerThanAFullRead(t *testing.T) {
	s, _ := newTestView(t)
	a := ep("west", "web", "10.0.0.1", 80)
	start := s.BeginFull()
	s.Apply(registry.Event{Type: registry.Added, Endpoint: a})
	s.EndFull(start, nil) // read before the event happened
	if s.entries[a.Key()] == nil {
		t.Fatal("a full read older than a watch event removed the endpoint")
	}
}

func TestPendingOverlaysBackend(t *testing.T) {
	s, events := newTestView(t)
	a := ep("east", "web", "10.0.0.1", 80)
	s.EndFull(s.BeginFull(), []endpoint.Endpoint{a})
	if _, err := s.Accept([]registry.Op{registry.Unregister(a)}, nil, nil); err != nil {
		t.Fatal(err)
	}
	s.EndFull(s.BeginFull(), []endpoint.Endpoint{a}) // not yet persisted: still in the backend
	if s.entries[a.Key()] != nil || *events != 2 {
		t.Fatalf("a poll brought back an endpoint whose removal is pending (%d events)", *events)
	}
	// A write while the previous one is in flight outlives the first's confirmation.
	first := s.TakeBatch(0)
	a2 := a
	a2.Weight = 3
	if _, err := s.Accept([]registry.Op{registry.Register(a2)}, nil, nil); err != nil {
		t.Fatal(err)
	}
	s.BatchDone(first, nil, false)
	if p := s.pending[a.Key()]; p == nil || p.op.Kind != registry.OpRegister {
		t.Fatal("confirming an older write dropped the newer pending one")
	}
	if e := s.entries[a.Key()]; e == nil || e.ep.Weight != 3 {
		t.Fatalf("visible entry %v, want the newer write", e)
	}
}

func TestFailedBatchIsRetriedNotLost(t *testing.T) {
	s, _ := newTestView(t)
	a, b := ep("east", "web", "10.0.0.1", 80), ep("east", "web", "10.0.0.2", 80)
	if _, err := s.Accept([]registry.Op{registry.Register(a), registry.Register(b)}, nil, nil); err != nil {
		t.Fatal(err)
	}
	batch := s.TakeBatch(0)
	if s.ndirty != 0 {
		t.Fatal("taken writes still counted as waiting")
	}
	s.BatchDone(batch, map[endpoint.Key]bool{b.Key(): true}, false) // partial failure
	if s.pending[a.Key()] != nil || s.pending[b.Key()] == nil || s.ndirty != 1 {
		t.Fatalf("after a partial failure: pending %v, %d waiting; want only b, waiting", s.pending, s.ndirty)
	}
	retry := s.TakeBatch(0)
	if len(retry) != 1 || retry[0].Op.Endpoint.Key() != b.Key() {
		t.Fatalf("retry batch %v, want b", retry)
	}
}

// The service index holds exactly the visible entries, each under its service,
// through additions, updates (which replace the entry) and removals.
func TestServiceIndexFollowsEntries(t *testing.T) {
	s, _ := newTestView(t)
	a := ep("east", "web", "10.0.0.1", 80)
	b := ep("east", "db", "10.0.0.2", 5432)
	a2 := a
	a2.Weight = 9
	s.Apply(registry.Event{Type: registry.Added, Endpoint: a})
	s.Apply(registry.Event{Type: registry.Added, Endpoint: b})
	checkServiceIndex(t, s, 2)
	s.Apply(registry.Event{Type: registry.Updated, Endpoint: a2})
	checkServiceIndex(t, s, 2)
	if got := s.ListAll(endpoint.Filter{Service: "web"}); len(got) == 0 {
		t.Fatal("a scoped listing of web is empty")
	}
	s.Apply(registry.Event{Type: registry.Removed, Endpoint: a2})
	checkServiceIndex(t, s, 1)
	if _, ok := s.byService["web"]; ok {
		t.Fatal("the index keeps a service without endpoints")
	}
}

func checkServiceIndex(t *testing.T, s *View, want int) {
	t.Helper()
	n := 0
	for svc, m := range s.byService {
		for e := range m {
			if e.ep.Service != svc || s.entries[e.ep.Key()] != e {
				t.Fatalf("index of %q holds %s, not the visible entry of its key", svc, e.ep.Key())
			}
			n++
		}
	}
	if n != want || len(s.entries) != want {
		t.Fatalf("index holds %d entries and the state %d, want %d", n, len(s.entries), want)
	}
}

// The change feed can deliver a write's echo, and then another writer's change to
// the same key, before the backend's Apply of the write has returned to the writer.
// The write's confirmation then must not put back what the feed has since removed:
// the view would show an endpoint the backend no longer has, until the next full read.
func TestConfirmationAfterTheFeedMovedOnKeepsTheFeedsState(t *testing.T) {
	s, _ := newTestView(t)
	s.SetFeedLive(true)
	a := ep("east", "web", "10.0.0.1", 80)
	if _, err := s.Accept([]registry.Op{registry.Register(a)}, nil, nil); err != nil {
		t.Fatal(err)
	}
	batch := s.TakeBatch(0)
	s.Apply(registry.Event{Type: registry.Added, Endpoint: a})   // our write's echo
	s.Apply(registry.Event{Type: registry.Removed, Endpoint: a}) // another writer removes it
	s.BatchDone(batch, nil, false)                               // the Apply returns only now
	if e := s.entries[a.Key()]; e != nil {
		t.Fatalf("the view shows %v, which the backend's feed reported removed after our write", e.ep)
	}
	if len(s.echoed) != 0 {
		t.Fatalf("bookkeeping leaks: %d keys remembered as echoed", len(s.echoed))
	}
}

// A read of part of the backend (one cluster, one service) replaces only that part:
// the entries of other parts stay, and an entry of the part that the read lacks goes.
func TestReadOfAPartLeavesTheOtherParts(t *testing.T) {
	s, _ := newTestView(t)
	own, remote, gone := ep("east", "web", "10.0.0.1", 80), ep("west", "db", "10.0.1.1", 80), ep("west", "db", "10.0.1.2", 80)
	s.EndFull(s.BeginFull(), []endpoint.Endpoint{own, remote, gone})
	east := func(k endpoint.Key) bool { return k.Cluster == "east" }
	db := func(k endpoint.Key) bool { return k.Service == "db" && k.Cluster != "east" }
	s.EndFullIn(s.BeginFull(), []endpoint.Endpoint{own, remote}, east) // a read of east that also lists a west entry
	if s.entries[remote.Key()] == nil || s.entries[gone.Key()] == nil || s.entries[own.Key()] == nil {
		t.Fatalf("a read of east changed entries of west: %v", s.entries)
	}
	s.EndFullIn(s.BeginFull(), []endpoint.Endpoint{remote}, db)
	if s.entries[gone.Key()] != nil || s.entries[remote.Key()] == nil || s.entries[own.Key()] == nil {
		t.Fatalf("a read of db without %s: entries %v", gone.Key(), s.entries)
	}
	s.EndFullIn(s.BeginFull(), nil, db) // the part is let go: its entries go, the rest stays
	if len(s.entries) != 1 || s.entries[own.Key()] == nil {
		t.Fatalf("after dropping db: entries %v", s.entries)
	}
}

// TakeBatch with a limit hands out the oldest waiting writes, and the rest wait, in
// order, for the next batch; a write that fails goes behind them.
func TestTakeBatchLimit(t *testing.T) {
	s, _ := newTestView(t)
	s.EndFull(s.BeginFull(), nil)
	var ops []registry.Op
	for i := range 5 {
		ops = append(ops, registry.Register(ep("east", "web", fmt.Sprintf("10.0.0.%d", i+1), 80)))
	}
	if _, err := s.Accept(ops, nil, nil); err != nil {
		t.Fatal(err)
	}
	addrs := func(b []BatchOp) (out []string) {
		for _, o := range b {
			out = append(out, o.Op.Endpoint.Address)
		}
		return out
	}
	first := s.TakeBatch(2)
	if got := addrs(first); !slices.Equal(got, []string{"10.0.0.1", "10.0.0.2"}) || s.DirtyCount() != 3 {
		t.Fatalf("TakeBatch(2) = %v, %d left waiting; want the first two, 3 left", got, s.DirtyCount())
	}
	s.BatchDone(first, map[endpoint.Key]bool{first[0].Op.Endpoint.Key(): true}, false)
	if got := addrs(s.TakeBatch(0)); !slices.Equal(got, []string{"10.0.0.3", "10.0.0.4", "10.0.0.5", "10.0.0.1"}) || s.DirtyCount() != 0 {
		t.Fatalf("TakeBatch(0) = %v, %d left waiting; want the other three, then the failed one", got, s.DirtyCount())
	}
}
