package memory

import (
	"slices"
	"time"

	"github.com/switchboard-mesh/switchboard/controlplane/store"
)

// The route table holds what a fleet has most of — a million routes at 10,000 nodes in
// 1,000 groups — in a form the garbage collector need not look into. Each route is a
// routeRec in one slice: its strings and its name are small integers into pools where
// each distinct value is kept once, with a count of the records using it, so a route
// holds no pointer, and neither do the maps by id and by key. A collection then marks
// a few thousand distinct strings instead of ten pointers per route, and a route costs
// 56 bytes instead of a 192-byte object plus its map slots. The indexes keep their
// sorted id slices (pointer-free too) under the pooled ids.

// pool keeps each distinct value once, under a small id, with the number of records
// that use it; a value no record uses any more is dropped and its id reused. Id 0 is
// the zero value (the empty string) and is not counted.
type pool[T comparable] struct {
	vals []T
	refs []int32
	ids  map[T]uint32
	free []uint32
}

func newPool[T comparable]() pool[T] {
	var zero T
	return pool[T]{vals: []T{zero}, refs: []int32{0}, ids: map[T]uint32{}}
}

// acquire returns v's id, counting one more user. hint, when not nil, is the id the
// caller acquired last for the same field, and is set to this one: a planning step
// writes a thousand routes to one announcer under one name, and comparing with the
// last value costs less than hashing it (a name is three strings).
func (p *pool[T]) acquire(v T, hint *uint32) uint32 {
	var zero T
	if v == zero {
		return 0
	}
	if hint != nil && p.refs[*hint] > 0 && p.vals[*hint] == v {
		p.refs[*hint]++
		return *hint
	}
	id, ok := p.ids[v]
	if !ok {
		if n := len(p.free); n > 0 {
			id, p.free = p.free[n-1], p.free[:n-1]
			p.vals[id] = v
		} else {
			id = uint32(len(p.vals))
			p.vals, p.refs = append(p.vals, v), append(p.refs, 0)
		}
		p.ids[v] = id
	}
	p.refs[id]++
	if hint != nil {
		*hint = id
	}
	return id
}

// release counts one user of id fewer.
func (p *pool[T]) release(id uint32) {
	if id == 0 {
		return
	}
	if p.refs[id]--; p.refs[id] == 0 {
		var zero T
		delete(p.ids, p.vals[id])
		p.vals[id] = zero
		p.free = append(p.free, id)
	}
}

// lookup returns v's id without counting a user; false if no record uses v.
func (p *pool[T]) lookup(v T) (uint32, bool) {
	var zero T
	if v == zero {
		return 0, true
	}
	id, ok := p.ids[v]
	return id, ok
}

// routeRec is a store.Route without pointers: its strings and name are pool ids, its
// time seconds and nanoseconds with the index of its location.
type routeRec struct {
	id, version                   int64
	sec                           int64
	nsec                          int32
	source, dest, link, msg, name uint32
	loc                           uint8
	status                        store.RouteStatus
	deleted                       bool
}

// routeKey is store.Route.Key in pool ids.
type routeKey struct{ source, link, dest, name uint32 }

// keyIndex holds the route ids by key, a map for each name: a planning step writes
// a name's routes one after another, into one map of a thousand keys that stays in
// the cache, where one map of a million keys missed it at every write.
type keyIndex map[uint32]map[keyInName]int64

type keyInName struct{ source, link, dest uint32 }

func (x keyIndex) has(k routeKey) bool {
	_, ok := x[k.name][keyInName{k.source, k.link, k.dest}]
	return ok
}

func (x keyIndex) put(k routeKey, id int64) {
	m := x[k.name]
	if m == nil {
		m = map[keyInName]int64{}
		x[k.name] = m
	}
	m[keyInName{k.source, k.link, k.dest}] = id
}

func (x keyIndex) del(k routeKey) {
	m := x[k.name]
	delete(m, keyInName{k.source, k.link, k.dest})
	if len(m) == 0 {
		delete(x, k.name)
	}
}

type routeTable struct {
	tally RouteTally
	recs  recChunks // by slot; a removed route's slot is reused
	free  []int32
	slot  slots // route id → slot
	byKey keyIndex
	// The indexes, by pool id.
	bySource, byDest, byLink, byName index[uint32, int64]
	strs                             pool[string]
	names                            pool[store.Name]
	hints                            struct{ source, dest, link, name uint32 } // for acquire
	locs                             []*time.Location
	nextID                           int64
}

func newRouteTable() *routeTable {
	return &routeTable{byKey: keyIndex{},
		bySource: index[uint32, int64]{}, byDest: index[uint32, int64]{}, byLink: index[uint32, int64]{},
		byName: index[uint32, int64]{}, strs: newPool[string](), names: newPool[store.Name](),
		locs: []*time.Location{time.UTC, time.Local}}
}

func (t *routeTable) isTemplate(r *routeRec) bool {
	return t.strs.vals[r.source] == store.AllNodes
}

func (t *routeTable) keyOf(r *routeRec) routeKey {
	if t.isTemplate(r) { // one announcement per node and name
		return routeKey{source: r.source, dest: r.dest, name: r.name}
	}
	return routeKey{source: r.source, link: r.link, name: r.name}
}

// lookupKey is keyOf for a route that is not stored; false when no stored route can
// have its key (one of its values is in no record).
func (t *routeTable) lookupKey(r store.Route) (routeKey, bool) {
	var k routeKey
	var ok [3]bool
	k.source, ok[0] = t.strs.lookup(r.SourceNodeID)
	k.name, ok[1] = t.names.lookup(r.Name)
	if r.IsTemplate() {
		k.dest, ok[2] = t.strs.lookup(r.DestNodeID)
	} else {
		k.link, ok[2] = t.strs.lookup(r.LinkID)
	}
	return k, ok[0] && ok[1] && ok[2]
}

// has reports whether a route with r's key is stored.
func (t *routeTable) has(r store.Route) bool {
	k, ok := t.lookupKey(r)
	if !ok {
		return false
	}
	return t.byKey.has(k)
}

// sameKey reports whether a and b have the same Key.
func sameKey(a, b store.Route) bool {
	if a.IsTemplate() != b.IsTemplate() || a.SourceNodeID != b.SourceNodeID || a.Name != b.Name {
		return false
	}
	if a.IsTemplate() {
		return a.DestNodeID == b.DestNodeID
	}
	return a.LinkID == b.LinkID
}

func (t *routeTable) locOf(tm time.Time) uint8 {
	loc := tm.Location()
	if i := slices.Index(t.locs, loc); i >= 0 {
		return uint8(i)
	}
	if len(t.locs) > 255 {
		return 0 // a store given 255 time zones keeps the rest's times in UTC
	}
	t.locs = append(t.locs, loc)
	return uint8(len(t.locs) - 1)
}

// route returns the record as a store.Route; its strings are the pooled ones, so this
// allocates nothing.
func (t *routeTable) route(r *routeRec) store.Route {
	return store.Route{ID: r.id, SourceNodeID: t.strs.vals[r.source], DestNodeID: t.strs.vals[r.dest],
		LinkID: t.strs.vals[r.link], Name: t.names.vals[r.name], Status: r.status, StatusMessage: t.strs.vals[r.msg],
		Deleted: r.deleted, LastUpdated: time.Unix(r.sec, int64(r.nsec)).In(t.locs[r.loc]), Version: r.version}
}

// get returns the route with id.
func (t *routeTable) get(id int64) (store.Route, bool) {
	s, ok := t.slot.get(id)
	if !ok {
		return store.Route{}, false
	}
	return t.route(t.recs.at(s)), true
}

// count adds d to the tallies r falls under.
func (t *routeTable) count(r *routeRec, d int) {
	switch {
	case t.isTemplate(r):
		if !r.deleted {
			t.tally.Templates += d
		}
	default:
		t.tally.Expansions += d
		if r.status == store.RouteApplied && !r.deleted {
			t.tally.ExpansionsApplied += d
		}
	}
}

func (t *routeTable) index(r *routeRec) {
	t.byKey.put(t.keyOf(r), r.id)
	t.bySource.add(r.source, r.id)
	t.byDest.add(r.dest, r.id)
	t.byLink.add(r.link, r.id)
	t.byName.add(r.name, r.id)
}

func (t *routeTable) unindex(r *routeRec) {
	t.byKey.del(t.keyOf(r))
	t.bySource.remove(r.source, r.id)
	t.byDest.remove(r.dest, r.id)
	t.byLink.remove(r.link, r.id)
	t.byName.remove(r.name, r.id)
}

// acquire sets rec's pooled fields from r.
func (t *routeTable) acquire(rec *routeRec, r store.Route) {
	h := &t.hints
	rec.source, rec.dest = t.strs.acquire(r.SourceNodeID, &h.source), t.strs.acquire(r.DestNodeID, &h.dest)
	rec.link, rec.msg = t.strs.acquire(r.LinkID, &h.link), t.strs.acquire(r.StatusMessage, nil)
	rec.name = t.names.acquire(r.Name, &h.name)
}

func (t *routeTable) release(r *routeRec) {
	t.strs.release(r.source)
	t.strs.release(r.dest)
	t.strs.release(r.link)
	t.strs.release(r.msg)
	t.names.release(r.name)
}

// create stores r, a new route, unless a route with its key is stored: the values are
// looked up once, for the key and the record.
func (t *routeTable) create(r store.Route) bool {
	rec := t.record(r)
	t.acquire(&rec, r)
	if t.byKey.has(t.keyOf(&rec)) {
		t.release(&rec)
		return false
	}
	t.insert(rec)
	return true
}

// record is r's fields that are not pooled.
func (t *routeTable) record(r store.Route) routeRec {
	return routeRec{id: r.ID, version: r.Version, sec: r.LastUpdated.Unix(), nsec: int32(r.LastUpdated.Nanosecond()),
		loc: t.locOf(r.LastUpdated), status: r.Status, deleted: r.Deleted}
}

// insert stores rec, whose id is not stored.
func (t *routeTable) insert(rec routeRec) {
	var s int32
	if n := len(t.free); n > 0 {
		s, t.free = t.free[n-1], t.free[:n-1]
	} else {
		s = t.recs.grow()
	}
	t.slot.set(rec.id, s)
	*t.recs.at(s) = rec
	t.count(&rec, 1)
	t.index(&rec)
}

// put stores r, replacing the route with its id, and returns the route it replaced
// when asked to (for a transaction's undo).
func (t *routeTable) put(r store.Route, wantOld bool) (old store.Route, had bool) {
	rec := t.record(r)
	s, had := t.slot.get(r.ID)
	if !had {
		t.acquire(&rec, r)
		t.insert(rec)
		return old, false
	}
	prev := t.recs.at(s)
	if wantOld {
		old = t.route(prev)
	}
	if t.strs.vals[prev.source] == r.SourceNodeID && t.strs.vals[prev.dest] == r.DestNodeID &&
		t.strs.vals[prev.link] == r.LinkID && t.names.vals[prev.name] == r.Name {
		// A status change, the reconcilers' everyday write: every index and every
		// pooled value but the message stays.
		rec.source, rec.dest, rec.link, rec.name, rec.msg = prev.source, prev.dest, prev.link, prev.name, prev.msg
		if t.strs.vals[prev.msg] != r.StatusMessage {
			rec.msg = t.strs.acquire(r.StatusMessage, nil)
			t.strs.release(prev.msg)
		}
		t.count(prev, -1)
		t.count(&rec, 1)
		*prev = rec
		return old, true
	}
	t.acquire(&rec, r)
	t.count(prev, -1)
	t.unindex(prev)
	t.release(prev)
	*t.recs.at(s) = rec
	t.count(&rec, 1)
	t.index(&rec)
	return old, true
}

// remove drops the route with id and returns it when asked to.
func (t *routeTable) remove(id int64, wantOld bool) (old store.Route, had bool) {
	s, had := t.slot.get(id)
	if !had {
		return old, false
	}
	prev := t.recs.at(s)
	if wantOld {
		old = t.route(prev)
	}
	t.count(prev, -1)
	t.unindex(prev)
	t.release(prev)
	*prev = routeRec{}
	t.slot.clear(id)
	t.free = append(t.free, s)
	return old, true
}

// routeQuery is a store.RouteFilter in pool ids.
type routeQuery struct {
	f                        store.RouteFilter
	source, dest, link, name uint32
	bySource, byDest, byLink bool
	byName                   bool
}

// query translates f; false when it can match nothing (a value no route holds).
func (t *routeTable) query(f store.RouteFilter) (routeQuery, bool) {
	q := routeQuery{f: f}
	ok := true
	lookup := func(v string, id *uint32, set *bool) {
		if v != "" {
			var found bool
			*id, found = t.strs.lookup(v)
			*set, ok = true, ok && found
		}
	}
	lookup(f.SourceNodeID, &q.source, &q.bySource)
	lookup(f.DestNodeID, &q.dest, &q.byDest)
	lookup(f.LinkID, &q.link, &q.byLink)
	if f.Name != nil {
		var found bool
		q.name, found = t.names.lookup(*f.Name)
		q.byName, ok = true, ok && found
	}
	return q, ok
}

func (t *routeTable) match(q *routeQuery, r *routeRec) bool {
	return q.f.Deleted.Match(r.deleted) && !(q.f.ExpansionsOnly && t.isTemplate(r)) &&
		(!q.bySource || r.source == q.source) && (!q.byDest || r.dest == q.dest) &&
		(!q.byLink || r.link == q.link) && (!q.byName || r.name == q.name)
}

// candidates returns the ids the query can match from its smallest index, or nil
// (with all true) when no field narrows it.
func (t *routeTable) candidates(q *routeQuery) (ids []int64, all bool) {
	all = true
	pick := func(set []int64) {
		if all || len(set) < len(ids) {
			ids, all = set, false
		}
	}
	if q.bySource {
		pick(t.bySource[q.source])
	}
	if q.byLink {
		pick(t.byLink[q.link])
	}
	if q.byName {
		pick(t.byName[q.name])
	}
	if q.byDest {
		pick(t.byDest[q.dest])
	}
	return ids, all
}

// list returns the routes f matches, in id order.
func (t *routeTable) list(f store.RouteFilter) []store.Route {
	q, ok := t.query(f)
	if !ok {
		return []store.Route{}
	}
	ids, all := t.candidates(&q)
	if all {
		ids = t.slot.ids()
	}
	out := make([]store.Route, 0, len(ids))
	for _, id := range ids {
		s, _ := t.slot.get(id)
		if r := t.recs.at(s); t.match(&q, r) {
			out = append(out, t.route(r))
		}
	}
	return out
}

// recChunks holds the records in chunks of a fixed size: appending to one slice of a
// million records copied it over and over (a large slice grows by a quarter at a
// time), five times its size in all.
type recChunks struct {
	chunks [][]routeRec
	n      int32
}

const recChunkBits = 12

func (c *recChunks) at(s int32) *routeRec {
	return &c.chunks[s>>recChunkBits][s&(1<<recChunkBits-1)]
}

// grow adds a slot and returns it.
func (c *recChunks) grow() int32 {
	if int(c.n>>recChunkBits) == len(c.chunks) {
		c.chunks = append(c.chunks, make([]routeRec, 1<<recChunkBits))
	}
	c.n++
	return c.n - 1
}

// slots finds a route's slot by its id without a map: ids are handed out in order,
// so they fall into pages of consecutive ids, and a lookup is two array reads
// instead of a probe of a million-entry map (a few cache misses each). A page is
// dropped when its last route goes; the pages before the first one left are trimmed
// from the directory. A page costs 2 KiB while any of its 512 ids lives, which is
// cheap because routes come and go a planning step at a time: a step's routes have
// neighbouring ids, and a re-plan replaces them together. A store whose every page
// kept one route of 512 would spend 2 KiB a route on them, and the directory 8 bytes
// for every 512 ids handed out since the oldest live route.
type slots struct {
	first int64 // the page number of pages[0]
	pages []*idPage
	n     int
}

const idPageBits = 9

type idPage struct {
	slot [1 << idPageBits]int32 // slot+1; 0: no route
	live int32
}

func (x *slots) page(id int64) (p *idPage, i int) {
	n := id>>idPageBits - x.first
	if n < 0 || n >= int64(len(x.pages)) {
		return nil, 0
	}
	return x.pages[n], int(id & (1<<idPageBits - 1))
}

func (x *slots) get(id int64) (int32, bool) {
	p, i := x.page(id)
	if p == nil || p.slot[i] == 0 {
		return 0, false
	}
	return p.slot[i] - 1, true
}

// set records id's slot; id holds none.
func (x *slots) set(id int64, s int32) {
	pn := id >> idPageBits
	switch {
	case len(x.pages) == 0:
		x.first = pn
	case pn < x.first: // an id below the first page (Restore puts routes in any order)
		x.pages = slices.Insert(x.pages, 0, make([]*idPage, x.first-pn)...)
		x.first = pn
	}
	for pn-x.first >= int64(len(x.pages)) {
		x.pages = append(x.pages, nil)
	}
	p := x.pages[pn-x.first]
	if p == nil {
		p = &idPage{}
		x.pages[pn-x.first] = p
	}
	p.slot[id&(1<<idPageBits-1)] = s + 1
	p.live++
	x.n++
}

func (x *slots) clear(id int64) {
	p, i := x.page(id)
	if p == nil || p.slot[i] == 0 {
		return
	}
	p.slot[i] = 0
	p.live--
	x.n--
	if p.live == 0 {
		x.pages[id>>idPageBits-x.first] = nil
		k := 0
		for k < len(x.pages) && x.pages[k] == nil {
			k++
		}
		if k == len(x.pages) {
			x.pages, x.first = x.pages[:0], 0
		} else if k > 0 {
			x.pages = slices.Delete(x.pages, 0, k)
			x.first += int64(k)
		}
	}
}

// ids returns every id held, in order.
func (x *slots) ids() []int64 {
	out := make([]int64, 0, x.n)
	for n, p := range x.pages {
		if p == nil {
			continue
		}
		base := (x.first + int64(n)) << idPageBits
		for i, s := range p.slot {
			if s != 0 {
				out = append(out, base+int64(i))
			}
		}
	}
	return out
}
