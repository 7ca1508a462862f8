package ui

import (
	"fmt"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/registrar/inspect"
)

func ep(cluster, service, addr string, port int, node string) endpoint.Endpoint {
	return endpoint.Endpoint{Cluster: cluster, Service: service, Protocol: "http", Address: addr, Port: port, Node: node, Priority: 1}
}

// clock is a test's time, moved by hand.
type clock struct{ t time.Time }

func (c *clock) now() time.Time          { return c.t }
func (c *clock) advance(d time.Duration) { c.t = c.t.Add(d) }
func newClock() *clock                   { return &clock{t: time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)} }
func testPage(src inspect.Source, c *clock) *Page {
	return New(Options{Source: src, Now: c.now, History: 16})
}

// TestMirrorFollowsChanges: the mirror takes adds, updates (a node that changes
// moves in the node index) and removals, keeps first-seen times, and records
// each change in the history, newest first.
func TestMirrorFollowsChanges(t *testing.T) {
	src, c := newFake(100), newClock()
	a := ep("east", "web", "10.0.0.1", 80, "n1")
	src.set(a)
	p := testPage(src, c)
	p.sample()
	p.reload()
	m := p.m
	if r := m.rows.get(a.Key()); r == nil || !r.early || !r.seenAt().Equal(c.t) {
		t.Fatalf("loaded row %+v", r)
	}

	c.advance(time.Minute)
	b := ep("west", "api", "10.0.1.1", 81, "n2")
	moved := a
	moved.Node = "n3"
	src.set(b, moved)
	p.pull()
	if m.version != 3 || m.rows.len() != 2 {
		t.Fatalf("version %d, %d rows; want 3, 2", m.version, m.rows.len())
	}
	if _, ok := m.byNode["n1"]; ok || len(m.byNode["n3"]) != 1 || len(m.byNode["n2"]) != 1 {
		t.Fatalf("node index %v", m.byNode)
	}
	if r := m.rows.get(b.Key()); r.early || !r.seenAt().Equal(c.t) {
		t.Fatalf("new row %+v", r)
	}
	if r := m.rows.get(a.Key()); !r.early || r.ep.Node != "n3" {
		t.Fatalf("updated row %+v", r)
	}

	src.remove(a.Key())
	p.pull()
	if m.rows.len() != 1 || len(m.groups) != 1 || m.groups.count("west") != 1 || len(m.byNode["n3"]) != 0 {
		t.Fatalf("after the removal: rows %d, indexes %v %v", m.rows.len(), m.groups, m.byNode)
	}
	h := m.hist.of(a.Key())
	if len(h) != 2 || h[0].Type != inspect.Removed || h[1].Type != inspect.Updated || h[0].Version != 4 {
		t.Fatalf("history of a: %+v", h)
	}
	if !m.touched["east"].Equal(c.t) || !m.touched["west"].Equal(c.t) {
		t.Fatalf("touched %v", m.touched)
	}
}

// TestMirrorReloadsWhenBehind: when the registrar's history no longer holds the
// mirror's version, the mirror reloads, keeping the endpoints' first-seen times,
// and its history says since when it is complete.
func TestMirrorReloadsWhenBehind(t *testing.T) {
	src, c := newFake(4), newClock()
	a := ep("east", "web", "10.0.0.1", 80, "")
	src.set(a)
	p := testPage(src, c)
	p.sample()
	p.reload()
	c.advance(time.Minute)
	for i := range 10 {
		src.set(ep("east", "web", fmt.Sprintf("10.0.1.%d", i), 80, ""))
	}
	p.pull()
	m := p.m
	if m.version != 11 || m.rows.len() != 11 {
		t.Fatalf("after the reload: version %d, %d rows", m.version, m.rows.len())
	}
	if r := m.rows.get(a.Key()); !r.early || !r.seenAt().Equal(c.t.Add(-time.Minute)) {
		t.Fatalf("a lost its first-seen time: %+v", r)
	}
	if !m.hist.complete().Equal(c.t) {
		t.Fatalf("history complete since %v, want the reload %v", m.hist.complete(), c.t)
	}
}

// TestHistoryRingIsBounded: the ring keeps the last changes only, and says since
// when it holds every one.
func TestHistoryRingIsBounded(t *testing.T) {
	h := newHistory(4)
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	h.restart(start)
	k := ep("east", "web", "10.0.0.1", 80, "").Key()
	for i := range 6 {
		h.add(newEvent(start.Add(time.Duration(i+1)*time.Second), inspect.Change{Type: inspect.Updated, Endpoint: k.Endpoint(), Version: uint64(i + 1)}))
	}
	got := h.of(k)
	if len(got) != 4 || got[0].Version != 6 || got[3].Version != 3 || h.held() != 4 {
		t.Fatalf("held %d: %+v", h.held(), got)
	}
	if want := start.Add(3 * time.Second); !h.complete().Equal(want) {
		t.Fatalf("complete since %v, want the oldest held %v", h.complete(), want)
	}
}

// TestLaggingNeedsAMoment: a watcher is shown lagging once it has been behind
// for lagMoment, not at the first sample that finds it behind, and no more once
// it has caught up; each change of that wakes the event streams.
func TestLaggingNeedsAMoment(t *testing.T) {
	src, c := newFake(10), newClock()
	p := testPage(src, c)
	st := inspect.Status{Cluster: "east", Watchers: []inspect.Watcher{{ID: 1, Node: "slow", Lag: 5}, {ID: 2, Node: "fast"}}}
	src.setStatus(st)
	p.sample()
	if p.m.lagging[1] {
		t.Fatal("lagging at the first sample")
	}
	gen, _ := p.m.watch()
	c.advance(lagMoment)
	p.sample()
	if !p.m.lagging[1] || p.m.lagging[2] {
		t.Fatalf("lagging %v after a moment", p.m.lagging)
	}
	if g, _ := p.m.watch(); g == gen {
		t.Fatal("becoming lagging did not wake the event streams")
	}
	st.Watchers[0].Lag = 0
	src.setStatus(st)
	c.advance(time.Second)
	p.sample()
	if len(p.m.lagging) != 0 || len(p.m.lagSince) != 0 {
		t.Fatalf("still lagging after catching up: %v", p.m.lagging)
	}
}

// TestRateMeter: batches per second over the last ten seconds of samples.
func TestRateMeter(t *testing.T) {
	var r rateMeter
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	if r.perSecond() != 0 {
		t.Fatal("a rate from no samples")
	}
	for i := range 21 {
		r.add(start.Add(time.Duration(i)*time.Second), uint64(3*i))
	}
	if got := r.perSecond(); got != 3 {
		t.Fatalf("rate %v, want 3", got)
	}
	if len(r.samples) > 12 {
		t.Fatalf("%d samples kept for a 10 s window", len(r.samples))
	}
}

// TestKeysChainCollisions: rows whose keys' hashes collide share a chain, and
// each is found and removed by its own key.
func TestKeysChainCollisions(t *testing.T) {
	c := newClock()
	x := newKeys(0)
	var rows []*row
	for i := range 3 {
		r := newRow(ep("east", "web", fmt.Sprintf("10.0.0.%d", i), 80, ""), c.t)
		rows = append(rows, r)
		x.putAt(7, r) // one hash for all
	}
	for _, r := range rows {
		if x.getAt(7, r.ep.Key()) != r {
			t.Fatalf("%s not found in its chain", r.ep.Key())
		}
	}
	x.removeAt(7, rows[1]) // the middle
	x.removeAt(7, rows[2]) // the head
	if x.len() != 1 || x.getAt(7, rows[1].ep.Key()) != nil || x.getAt(7, rows[2].ep.Key()) != nil || x.getAt(7, rows[0].ep.Key()) != rows[0] {
		t.Fatalf("after two removals: %d rows", x.len())
	}
	x.removeAt(7, rows[0])
	if x.len() != 0 || len(x.m) != 0 {
		t.Fatalf("after the last removal: %d rows, %d chains", x.len(), len(x.m))
	}
	r := newRow(ep("east", "api", "10.0.0.1", 80, ""), c.t)
	x.put(r)
	if x.get(r.ep.Key()) != r || x.get(rows[0].ep.Key()) != nil {
		t.Fatal("get by hash")
	}
}

// TestEndpointsBeforeReadyAreOld: endpoints that arrive before the registrar has
// read the backend in full were there before the page, whatever their first
// change says; the ones after are new.
func TestEndpointsBeforeReadyAreOld(t *testing.T) {
	src, c := newFake(100), newClock()
	src.setStatus(inspect.Status{Cluster: "east"}) // not ready
	p := testPage(src, c)
	p.sample()
	p.reload()
	old := ep("east", "web", "10.0.0.1", 80, "")
	src.set(old)
	p.pull()
	src.setStatus(inspect.Status{Cluster: "east", Ready: true})
	p.sample()
	fresh := ep("east", "web", "10.0.0.2", 80, "")
	src.set(fresh)
	p.pull()
	if !p.m.rows.get(old.Key()).early || p.m.rows.get(fresh.Key()).early {
		t.Fatalf("early: %v before ready, %v after", p.m.rows.get(old.Key()).early, p.m.rows.get(fresh.Key()).early)
	}
}

// TestKeepingUpIsNotLagging: under steady writes a watcher a few events behind
// at every sample, but past what the previous sample saw, is not lagging; one
// whose position stays put is.
func TestKeepingUpIsNotLagging(t *testing.T) {
	src, c := newFake(10), newClock()
	p := testPage(src, c)
	var stuckAt uint64
	for i := range 6 {
		src.mu.Lock()
		for range 100 {
			src.log = append(src.log, inspect.Change{}) // Status reports Version len(log)
		}
		v := uint64(len(src.log))
		if i == 0 {
			stuckAt = v - 2
		}
		src.status = inspect.Status{Cluster: "east", Ready: true, Watchers: []inspect.Watcher{
			{ID: 1, Node: "busy", Lag: 3},
			{ID: 2, Node: "stuck", Lag: v + 1 - stuckAt},
		}}
		src.mu.Unlock()
		p.sample()
		c.advance(500 * time.Millisecond)
	}
	if p.m.lagging[1] {
		t.Fatal("a watcher 3 events behind at every sample, past the previous sample's version, is shown lagging")
	}
	if !p.m.lagging[2] {
		t.Fatal("a watcher that does not move is not shown lagging")
	}
}

// TestHistoryMemoryIsBounded: the ring keeps what the history view shows of a
// change, not the endpoint: large annotations do not make it large.
func TestHistoryMemoryIsBounded(t *testing.T) {
	heap := func() uint64 {
		runtime.GC()
		runtime.GC()
		var s runtime.MemStats
		runtime.ReadMemStats(&s)
		return s.HeapAlloc
	}
	const size = 1000
	m := newMirror(size)
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	before := heap()
	for i := range size {
		e := ep("east", "blob", "10.0.0.9", 7000, "n1")
		e.Weight = i
		e.Annotations = map[string]string{}
		for j := range 40 {
			e.Annotations[fmt.Sprintf("chunk-%02d", j)] = strings.Repeat("x", 1000) // 40 KB an endpoint, 40 MB in all
		}
		m.apply([]inspect.Change{{Type: inspect.Updated, Endpoint: e, Version: uint64(i + 1)}}, uint64(i+1), now)
	}
	m.rows = newKeys(0) // the current endpoint is not the ring's
	grew := int64(heap()) - int64(before)
	t.Logf("the ring of %d changes of a 40 KB endpoint holds %d KB", size, grew>>10)
	if grew > 6<<20 {
		t.Fatalf("the ring of %d changes holds %d MB", size, grew>>20)
	}
	if h := m.history(ep("east", "blob", "10.0.0.9", 7000, "").Key(), now); len(h.Events) != size || len(h.Events[0].Annotations) != maxHistoryAnnotations+1 {
		t.Fatalf("history: %d events, %d annotations", len(h.Events), len(h.Events[0].Annotations))
	}
	runtime.KeepAlive(m)
}

// TestStatusChangesWakeTheStreams: a watcher's new scope, peer or resume shows
// on the page, so it wakes the event streams.
func TestStatusChangesWakeTheStreams(t *testing.T) {
	src, c := newFake(10), newClock()
	p := testPage(src, c)
	base := inspect.Watcher{ID: 1, Node: "n1", Peer: "10.0.0.1:5000", Services: []string{"api", "web"}, ScopeSize: 2}
	for name, change := range map[string]func(*inspect.Watcher){
		"services": func(w *inspect.Watcher) { w.Services = []string{"api", "db"} },
		"peer":     func(w *inspect.Watcher) { w.Peer = "10.0.0.2:5000" },
		"resumed":  func(w *inspect.Watcher) { w.Resumed = true },
	} {
		src.setStatus(inspect.Status{Cluster: "east", Ready: true, Watchers: []inspect.Watcher{base}})
		p.sample()
		gen, _ := p.m.watch()
		w := base
		w.Services = slices.Clone(base.Services)
		change(&w)
		src.setStatus(inspect.Status{Cluster: "east", Ready: true, Watchers: []inspect.Watcher{w}})
		p.sample()
		if g, _ := p.m.watch(); g == gen {
			t.Errorf("a change of the watcher's %s did not wake the event streams", name)
		}
	}
}
