package ui

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/registrar/inspect"
)

// mirror is the page's copy of the registrar's endpoints, indexed by cluster
// and service, and by node, with the recent changes (history) and the last
// sample of the registrar's status: about 25 MB at 100,000 endpoints. Page.Run's goroutine is its only writer, under mu;
// renders read it under the read lock.
type mirror struct {
	mu      sync.RWMutex
	version uint64 // the registrar's version the rows are at
	// gen counts the changes of what the page shows (rows or status); changed
	// is closed at the next one, for the event streams.
	gen     uint64
	changed chan struct{}

	rows   *keys
	groups groups
	byNode index // endpoints without a node are left out: no filter asks for ""
	// touched is when a change last touched each cluster; zero for the clusters
	// that have not changed since the page started.
	touched map[string]time.Time
	// started is when the mirror was first loaded.
	started time.Time
	hist    history

	status inspect.Status
	// ready is set by the first sample that found the registrar ready, at
	// version readyAt: the changes up to it are of the registrar's first read
	// of the backend (or came within a poll of its end), their endpoints older
	// than the page.
	ready    bool
	readyAt  uint64
	lagSince map[uint64]lagMark // watcher id: since when it has been behind
	lagging  map[uint64]bool    // the watchers behind for longer than lagMoment
	batches  rateMeter          // write batches sent, sampled
	rate     float64            // of them, per second
}

// lagMark is when a watcher was seen behind, and the version it was then to
// reach: it is lagging if it has not passed target lagMoment after since.
type lagMark struct {
	since  time.Time
	target uint64
}

// lagMoment is how long a watcher must stay behind to be shown as lagging: a
// fan-out in progress puts every watcher behind for a few milliseconds.
const lagMoment = time.Second

// index is sets of rows by a name.
type index map[string]map[*row]struct{}

func (x index) add(k string, r *row) {
	m := x[k]
	if m == nil {
		m = map[*row]struct{}{}
		x[k] = m
	}
	m[r] = struct{}{}
}

func (x index) remove(k string, r *row) {
	if m := x[k]; m != nil {
		delete(m, r)
		if len(m) == 0 {
			delete(x, k)
		}
	}
}

// groups indexes the rows by cluster, then service: in the page's order. A
// view reads the rows it shows, of the first groups in order, and counts the
// others by their groups' sizes: a page of a 100,000-endpoint registrar costs
// what its first 500 rows do, not a pass over every row (30 ms, a cache miss
// per row).
type groups map[string]index

func (g groups) add(r *row) {
	x := g[r.ep.Cluster]
	if x == nil {
		x = index{}
		g[r.ep.Cluster] = x
	}
	x.add(r.ep.Service, r)
}

func (g groups) remove(r *row) {
	if x := g[r.ep.Cluster]; x != nil {
		x.remove(r.ep.Service, r)
		if len(x) == 0 {
			delete(g, r.ep.Cluster)
		}
	}
}

// count is the number of rows of cluster c.
func (g groups) count(c string) int {
	n := 0
	for _, set := range g[c] {
		n += len(set)
	}
	return n
}

// row is one endpoint as the page knows it: 144 bytes, most of them the
// endpoint's.
type row struct {
	ep endpoint.Endpoint
	// seen is when the page first saw the endpoint, Unix ns; early is true for
	// the ones that were there when it started, or came before the registrar
	// had read the backend in full: their age is at least that.
	seen  int64
	next  *row // of the same key hash (keys)
	early bool
	// v4 is true when the address is IPv4, ip4 then its value: the page's order
	// compares addresses as IPs, and parsing them at every comparison made a
	// first view at 100,000 endpoints three times slower. (IPv6 ones are
	// parsed then; these fit in the row's padding.)
	v4  bool
	ip4 uint32
}

func newRow(e endpoint.Endpoint, seen time.Time) *row {
	r := &row{ep: e, seen: seen.UnixNano()}
	r.setAddr()
	return r
}

func (r *row) setAddr() {
	a, err := netip.ParseAddr(r.ep.Address)
	r.v4 = err == nil && a.Is4()
	if r.v4 {
		b := a.As4()
		r.ip4 = uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	}
}

func (r *row) seenAt() time.Time { return time.Unix(0, r.seen) }

func newMirror(historySize int) *mirror {
	return &mirror{changed: make(chan struct{}), rows: newKeys(0), groups: groups{}, byNode: index{}, touched: map[string]time.Time{}, hist: newHistory(historySize)}
}

// bump notes a change of what the page shows and wakes the event streams.
// Callers hold mu.
func (m *mirror) bump() {
	m.gen++
	close(m.changed)
	m.changed = make(chan struct{})
}

// watch returns the current generation and a channel closed at the next.
func (m *mirror) watch() (uint64, <-chan struct{}) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.gen, m.changed
}

// isReady reports whether a sample found the registrar ready.
func (m *mirror) isReady() bool {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.ready
}

// at returns the version the mirror is at.
func (m *mirror) at() uint64 {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.version
}

// load replaces the rows with eps, the registrar's endpoints at version: at the
// start and whenever the page fell behind the registrar's history. Endpoints
// the page knew keep their first-seen time. The new indexes are built before
// the lock is taken (the writer alone changes rows), so renders wait only for
// the swap.
func (m *mirror) load(eps []endpoint.Endpoint, version uint64, now time.Time) {
	first := m.started.IsZero()
	early := first || m.old(version) // the writer's own fields: no lock to read them
	rows := newKeys(len(eps))
	byGroup, byNode := groups{}, index{}
	for _, e := range eps {
		k := e.Key()
		r := newRow(e, now)
		r.early = early
		if old := m.rows.get(k); old != nil {
			r.seen, r.early = old.seen, old.early
		}
		rows.put(r)
		byGroup.add(r)
		if e.Node != "" {
			byNode.add(e.Node, r)
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if first {
		m.started = now
	}
	m.rows, m.groups, m.byNode = rows, byGroup, byNode
	m.version = version
	m.hist.restart(now) // the changes in between are not known
	m.bump()
}

// apply takes changes, which bring the mirror to version next.
func (m *mirror) apply(changes []inspect.Change, next uint64, now time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, c := range changes {
		m.applyOne(c, now)
	}
	m.version = next
	if len(changes) > 0 {
		m.bump()
	}
}

func (m *mirror) applyOne(c inspect.Change, now time.Time) {
	e := c.Endpoint
	k := e.Key()
	r := m.rows.get(k)
	switch {
	case c.Type == inspect.Removed && r != nil:
		m.rows.remove(r)
		m.groups.remove(r)
		m.byNode.remove(r.ep.Node, r)
	case c.Type == inspect.Removed:
	case r == nil:
		r = newRow(e, now)
		r.early = m.old(c.Version)
		m.rows.put(r)
		m.groups.add(r)
		if e.Node != "" {
			m.byNode.add(e.Node, r)
		}
	default:
		if r.ep.Node != e.Node {
			m.byNode.remove(r.ep.Node, r)
			if e.Node != "" {
				m.byNode.add(e.Node, r)
			}
		}
		r.ep = e // same key: same hash
	}
	m.touched[k.Cluster] = now
	m.hist.add(newEvent(now, c))
}

// old reports whether the endpoints of a change at version v were there before
// the page could tell: it came before the registrar was ready.
func (m *mirror) old(v uint64) bool { return !m.ready || v <= m.readyAt }

// setStatus records a sample of the registrar's status, and wakes the event
// streams if it changed what the page shows.
func (m *mirror) setStatus(st inspect.Status, now time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	lagSince := make(map[uint64]lagMark)
	lagging := make(map[uint64]bool)
	for _, w := range st.Watchers {
		if !w.SendingSince.IsZero() && now.Sub(w.SendingSince) >= lagMoment {
			lagging[w.ID] = true // a send blocked that long: snapshot or not
		}
		if w.Lag == 0 {
			continue
		}
		// Under steady writes a watcher that keeps up is a few events behind
		// at every sample: it lags only if it has not passed, within
		// lagMoment, the version it was first seen behind.
		pos := st.Version + 1 - min(w.Lag, st.Version+1) // the next version it is to be sent
		mark, ok := m.lagSince[w.ID]
		if !ok || pos > mark.target {
			mark = lagMark{since: now, target: st.Version}
		}
		lagSince[w.ID] = mark
		if now.Sub(mark.since) >= lagMoment {
			lagging[w.ID] = true
		}
	}
	m.batches.add(now, st.Backend.Batches)
	rate := m.batches.perSecond()
	changed := !sameStatus(m.status, st) || !maps.Equal(m.lagging, lagging) || formatRate(rate) != formatRate(m.rate)
	m.status, m.lagSince, m.lagging, m.rate = st, lagSince, lagging, rate
	if st.Ready && !m.ready {
		m.ready, m.readyAt = true, st.Version
	}
	if changed {
		m.bump()
	}
}

// sameStatus reports whether a and b show the same on the page, but for their
// version, which the rows' changes report.
func sameStatus(a, b inspect.Status) bool {
	if a.Ready != b.Ready || a.Backend != b.Backend || len(a.Watchers) != len(b.Watchers) {
		return false
	}
	for i := range a.Watchers {
		x, y := a.Watchers[i], b.Watchers[i]
		if x.ID != y.ID || x.Snapshot != y.Snapshot || x.ScopeSize != y.ScopeSize || x.Resumes != y.Resumes || x.Lag != y.Lag ||
			x.Resumed != y.Resumed || x.Peer != y.Peer || x.AllServices != y.AllServices || !slices.Equal(x.Services, y.Services) {
			return false
		}
	}
	return true
}

// event is one change the page saw, and when: what the history view shows of
// it, not the endpoint, whose annotations can be large (an endpoint's are up to
// 64 KiB). A change's Annotations are cut as the view shows them (80 bytes a
// key and a value), at most maxHistoryAnnotations of them and a note of the
// others: a change of a 1 MB endpoint costs the ring about 3 KB at most.
type event struct {
	At       time.Time
	Version  uint64
	Type     inspect.ChangeType
	Key      endpoint.Key
	Node     string
	TTL      endpoint.TTL
	Priority int
	Weight   int
	// Annotations are "key=value", sorted, cut (annotations).
	Annotations []string
}

// maxHistoryAnnotations bounds the annotations a change in the history keeps.
const maxHistoryAnnotations = 16

func newEvent(at time.Time, c inspect.Change) event {
	e := &c.Endpoint
	return event{At: at, Version: c.Version, Type: c.Type, Key: e.Key(), Node: e.Node, TTL: e.TTL, Priority: e.Priority,
		Weight: e.Weight, Annotations: historyAnnotations(e.Annotations)}
}

// historyAnnotations is annotations(a) with keys cut too, at most
// maxHistoryAnnotations of them and a note of how many more there were.
func historyAnnotations(a map[string]string) []string {
	if len(a) == 0 {
		return nil
	}
	keys := slices.Sorted(maps.Keys(a))
	out := make([]string, 0, min(len(keys), maxHistoryAnnotations)+1)
	for _, k := range keys[:min(len(keys), maxHistoryAnnotations)] {
		out = append(out, shorten(k)+"="+shorten(a[k])) // a new string: nothing of a is kept
	}
	if n := len(keys) - maxHistoryAnnotations; n > 0 {
		out = append(out, fmt.Sprintf("… and %d more", n))
	}
	return out
}

// history is a ring of the latest changes, for /ui/history.
type history struct {
	buf  []event
	next int  // where the next one goes
	full bool // buf has wrapped
	// since is when the ring began to hold every change (the page's start, or
	// its last reload, which missed some).
	since time.Time
}

func newHistory(size int) history { return history{buf: make([]event, size)} }

func (h *history) add(e event) {
	h.buf[h.next] = e
	h.next = (h.next + 1) % len(h.buf)
	h.full = h.full || h.next == 0
}

// restart notes that changes before now may be missing.
func (h *history) restart(now time.Time) { h.since = now }

// held is the number of changes in the ring.
func (h *history) held() int {
	if h.full {
		return len(h.buf)
	}
	return h.next
}

// complete is the time since when the ring holds every change.
func (h *history) complete() time.Time {
	if h.full && h.buf[h.next].At.After(h.since) {
		return h.buf[h.next].At // the oldest held
	}
	return h.since
}

// of returns the changes of key k, newest first.
func (h *history) of(k endpoint.Key) []event {
	var out []event
	n := h.held()
	for i := 1; i <= n; i++ {
		e := h.buf[(h.next-i+len(h.buf))%len(h.buf)]
		if e.Key == k {
			out = append(out, e)
		}
	}
	return out
}

// rateMeter turns samples of a counter into a rate over the last rateWindow.
type rateMeter struct {
	samples []sample
}

type sample struct {
	at    time.Time
	count uint64
}

const rateWindow = 10 * time.Second

func (r *rateMeter) add(at time.Time, count uint64) {
	r.samples = append(r.samples, sample{at, count})
	i := 0
	for i < len(r.samples)-1 && at.Sub(r.samples[i].at) > rateWindow {
		i++
	}
	r.samples = slices.Delete(r.samples, 0, i)
}

// perSecond is the rate over the samples held; 0 before two.
func (r *rateMeter) perSecond() float64 {
	if len(r.samples) < 2 {
		return 0
	}
	a, b := r.samples[0], r.samples[len(r.samples)-1]
	d := b.at.Sub(a.at).Seconds()
	if d <= 0 || b.count < a.count {
		return 0
	}
	return float64(b.count-a.count) / d
}
