package client

import (
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/registrar/token"
	"github.com/switchboard-mesh/switchboard/registry"
)

// cache is the agent's copy of the registrar's snapshot (base), with this client's
// own writes overlaid until the stream reflects them. What readers and watchers see
// (the view) is kept per service as a map plus a sorted slice, rebuilt lazily after
// a change, so a read of a service is a map lookup returning a shared slice.
type cache struct {
	mu   sync.RWMutex
	base map[endpoint.Key]endpoint.Endpoint
	own  map[endpoint.Key]*ownWrite
	// order lists overlaid keys in write order, so overlays retire as the stream's
	// version passes theirs; unconfirmed lists remembered writes in write order, so
	// they are forgotten from the front as the persisted frontier passes them.
	order       []endpoint.Key
	unconfirmed []ownRef
	svcs        map[string]*service
	all         []endpoint.Endpoint // sorted view of everything; valid when allOK
	allOK       bool

	at        token.Version // the last version applied from the stream
	persisted token.Version // the last persisted frontier the stream reported
	ready     bool
	readyCh   chan struct{}
	current   bool      // the stream is up and its initial phase complete
	lastGood  time.Time // when the cache was last known current
	watchers  map[*watcher]struct{}
	now       func() time.Time

	// currentSince is when current last changed (the cache's start before it
	// first does): a stream's (re)connection or its end, not every snapshot a
	// scope change brings on the same stream (inspect.go).
	currentSince time.Time

	// covered is the set of services base holds (nil: all); scopes maps the ids
	// of the sets a scoped client asked for to the sets (scope.go).
	covered   map[string]struct{}
	coveredID uint64
	scopes    map[uint64]map[string]struct{}
	lastScope uint64
}

type service struct {
	eps    map[endpoint.Key]endpoint.Endpoint
	sorted []endpoint.Endpoint
	ok     bool // sorted matches eps
}

// ownWrite is the last write this client made to a key, remembered until the
// registrar reports it persisted, so that it can be sent again if the replica that
// accepted it dies first.
type ownWrite struct {
	op      registry.Op
	at      token.Version // the registrar version the write is visible at
	when    time.Time
	overlay bool               // shown instead of base until the stream passes at
	trace   *trace.SpanContext // the write's trace context, nil if it is not traced (tracing.go)
}

func newCache(now func() time.Time) *cache {
	c := &cache{
		base:     map[endpoint.Key]endpoint.Endpoint{},
		own:      map[endpoint.Key]*ownWrite{},
		svcs:     map[string]*service{},
		readyCh:  make(chan struct{}),
		watchers: map[*watcher]struct{}{},
		scopes:   map[uint64]map[string]struct{}{},
		now:      now,
		lastGood: now(),
	}
	c.currentSince = c.lastGood
	return c
}

// visible is what key k looks like to readers.
func (c *cache) visible(k endpoint.Key) (endpoint.Endpoint, bool) {
	if w := c.own[k]; w != nil && w.overlay {
		if w.op.Kind == registry.OpRegister {
			return w.op.Endpoint, true
		}
		return endpoint.Endpoint{}, false
	}
	e, ok := c.base[k]
	return e, ok
}

// refresh brings the view of k in line with visible and tells the watchers.
func (c *cache) refresh(k endpoint.Key) {
	want, ok := c.visible(k)
	s := c.svcs[k.Service]
	var cur endpoint.Endpoint
	had := false
	if s != nil {
		cur, had = s.eps[k]
	}
	var ev registry.EventType
	switch {
	case ok && !had:
		ev = registry.Added
	case ok && !endpoint.Equal(cur, want):
		ev = registry.Updated
	case !ok && had:
		ev = registry.Removed
	default:
		return
	}
	if s == nil {
		s = &service{eps: map[endpoint.Key]endpoint.Endpoint{}}
		c.svcs[k.Service] = s
	}
	if ok {
		s.eps[k] = want
	} else {
		delete(s.eps, k)
		want = cur
		if len(s.eps) == 0 {
			delete(c.svcs, k.Service)
		}
	}
	s.ok, c.allOK = false, false
	if c.ready {
		c.notify(registry.Event{Type: ev, Endpoint: want})
	}
}

type ownRef struct {
	key endpoint.Key
	w   *ownWrite
}

// wrote records writes the registrar accepted at version v and shows them at once.
func (c *cache) wrote(ops []registry.Op, v token.Version) { c.wroteTraced(ops, v, nil) }

// wroteTraced is wrote for writes of a traced call: each remembers tr.
func (c *cache) wroteTraced(ops []registry.Op, v token.Version, tr *trace.SpanContext) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	for _, op := range ops {
		k := op.Endpoint.Key()
		if c.persisted.Epoch == v.Epoch && c.persisted.Seq >= v.Seq {
			// The stream already said so: the write is persisted (only a message
			// sent after a write can cover its version), and the view shows it.
			delete(c.own, k)
			c.refresh(k)
			continue
		}
		w := &ownWrite{op: op, at: v, when: now, overlay: !c.passed(v), trace: tr}
		c.own[k] = w
		c.unconfirmed = append(c.unconfirmed, ownRef{key: k, w: w})
		if w.overlay {
			c.order = append(c.order, k)
		}
		c.refresh(k)
	}
	c.compactUnconfirmed()
}

// compactUnconfirmed drops the references to superseded writes once they outnumber
// the live ones: an agent that refreshes the same keys for as long as nothing
// confirms them keeps a list the size of its keys, not of its writes.
func (c *cache) compactUnconfirmed() {
	if len(c.unconfirmed) <= 2*len(c.own)+64 {
		return
	}
	kept := c.unconfirmed[:0]
	for _, r := range c.unconfirmed {
		if c.own[r.key] == r.w {
			kept = append(kept, r)
		}
	}
	clear(c.unconfirmed[len(kept):])
	c.unconfirmed = kept
}

// passed reports whether the stream has applied version v of the same replica.
func (c *cache) passed(v token.Version) bool {
	return c.at.Epoch == v.Epoch && c.at.Seq >= v.Seq
}

// retire stops overlaying the writes the stream has caught up with.
func (c *cache) retire() {
	kept := c.order[:0]
	for _, k := range c.order {
		w := c.own[k]
		if w == nil || !w.overlay {
			continue
		}
		// A write made through another replica (during a failover) cannot be
		// compared by version; it retires once the stream shows it.
		if c.passed(w.at) || (w.at.Epoch != c.at.Epoch && c.agrees(k, w)) {
			w.overlay = false
			c.refresh(k)
			continue
		}
		kept = append(kept, k)
	}
	clear(c.order[len(kept):])
	c.order = kept
}

// confirm forgets the writes the registrar reports persisted. A frontier of 0 says
// that nothing is.
func (c *cache) confirm(p token.Version) {
	if p.Seq == 0 {
		return
	}
	c.persisted = p
	n := 0
	for _, r := range c.unconfirmed {
		w := c.own[r.key]
		if w != r.w { // superseded by a later write, or forgotten
			n++
			continue
		}
		if w.overlay || w.at.Epoch != p.Epoch || w.at.Seq > p.Seq {
			break
		}
		delete(c.own, r.key)
		n++
	}
	clear(c.unconfirmed[:n])
	c.unconfirmed = c.unconfirmed[n:]
	if len(c.unconfirmed) == 0 {
		c.unconfirmed = nil
	}
}

// agrees reports whether the stream's state of k is what the write w made it.
func (c *cache) agrees(k endpoint.Key, w *ownWrite) bool {
	cur, ok := c.base[k]
	if w.op.Kind == registry.OpUnregister {
		return !ok
	}
	return ok && endpoint.Equal(cur, w.op.Endpoint)
}

// change applies one ADDED, UPDATED or REMOVED event of the stream.
func (c *cache) change(t registry.EventType, e endpoint.Endpoint, v, persisted token.Version) {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := e.Key()
	if t == registry.Removed {
		delete(c.base, k)
	} else {
		c.base[k] = e
	}
	c.at = v
	c.refresh(k)
	c.retire()
	c.confirm(persisted)
}

// progressed applies a PROGRESS: a version with no change, whose frontier confirms
// writes that changed nothing anyone sees.
func (c *cache) progressed(v, persisted token.Version) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.at = v
	c.retire()
	c.confirm(persisted)
}

// resumed records a SNAPSHOT_COMPLETE after a replay: the cache is current at v.
// A resume into another epoch (the registrar found its state's digest equal to the
// token's, docs/registrar.md) is a move to a replica that may not have persisted
// what the last one accepted: as after a full snapshot in a new epoch, it returns
// the writes of this client the registrar lost, to be sent again.
func (c *cache) resumed(v, persisted token.Version, scopeID uint64) []ownRef {
	c.mu.Lock()
	defer c.mu.Unlock()
	if scopeID != 0 {
		c.scopeSet(scopeID) // the set is the one the cache held
		c.coveredID = scopeID
	}
	newEpoch := c.at.Epoch != v.Epoch
	c.at = v
	var resend []ownRef
	if newEpoch {
		resend = c.reconcileOwn(true)
		for k := range c.own {
			c.refresh(k)
		}
	}
	c.retire()
	c.confirm(persisted)
	c.markCurrent()
	return resend
}

// replace installs a full snapshot taken at v. It returns the writes of this client
// that the registrar lost, to be sent again: only after moving to another replica
// or epoch, which may not have persisted what the last one accepted.
func (c *cache) replace(snap map[endpoint.Key]endpoint.Endpoint, v, persisted token.Version, scopeID uint64) []ownRef {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.covered, c.coveredID = c.scopeSet(scopeID), scopeID
	old := c.base
	newEpoch := c.at.Epoch != v.Epoch
	c.base, c.at = snap, v
	resend := c.reconcileOwn(newEpoch)
	// The view changes only where the snapshot differs from the last one, or where
	// this client's writes are shown.
	registry.Diff(old, snap, endpoint.Equal, func(_ registry.EventType, k endpoint.Key, _ endpoint.Endpoint) bool {
		c.refresh(k)
		return true
	})
	for k := range c.own {
		c.refresh(k)
	}
	c.retire()
	c.confirm(persisted)
	if !c.ready {
		c.ready = true
		close(c.readyCh)
	}
	for w := range c.watchers {
		if !w.synced && c.settled(w.filter) {
			c.sendInitial(w)
		}
	}
	c.markCurrent()
	return resend
}

// reconcileOwn compares this client's unconfirmed writes with a new snapshot.
// Writes the snapshot agrees with stop being overlaid. After a move to another
// replica or epoch, writes made through an earlier one that the snapshot lacks are
// kept overlaid and returned for re-sending; registrations past their TTL are
// forgotten.
func (c *cache) reconcileOwn(newEpoch bool) []ownRef {
	var resend []ownRef
	now := c.now()
	for k, w := range c.own {
		switch {
		case expired(w, now):
			delete(c.own, k)
			c.refresh(k)
		case c.agrees(k, w) && w.at.Epoch != c.at.Epoch:
			// The new replica has it, and can only have learnt it from the
			// backend: it is persisted.
			delete(c.own, k)
		case c.agrees(k, w):
			w.overlay = false
		case w.at.Epoch == c.at.Epoch:
			// Written through this very replica: the stream brings it in order.
		case newEpoch:
			if !w.overlay {
				w.overlay = true
				c.order = append(c.order, k)
			}
			w.at = unsent(c.at.Epoch)
			resend = append(resend, ownRef{key: k, w: w})
		}
	}
	return resend
}

// expired reports whether a remembered registration has outlived its TTL, so that
// sending it again would resurrect an endpoint its owner let lapse.
func expired(w *ownWrite, now time.Time) bool {
	ttl := w.op.Endpoint.TTL.Duration()
	return w.op.Kind == registry.OpRegister && ttl > 0 && now.Sub(w.when) > ttl
}

// unsent is the version of a write waiting to be sent again: no stream passes it.
func unsent(epoch uint64) token.Version { return token.Version{Epoch: epoch, Seq: ^uint64(0)} }

// stillLost returns, of the writes to re-send, those that are still the last write
// to their key and not yet re-sent. A write the agent made since supersedes a lost
// one: sending the lost one after it would undo it.
func (c *cache) stillLost(refs []ownRef) []ownRef {
	c.mu.RLock()
	defer c.mu.RUnlock()
	var live []ownRef
	for _, r := range refs {
		if c.own[r.key] == r.w && r.w.at == unsent(r.w.at.Epoch) {
			live = append(live, r)
		}
	}
	return live
}

// resent records that re-sent writes are visible at v.
func (c *cache) resent(refs []ownRef, v token.Version) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, r := range refs {
		if c.own[r.key] == r.w {
			r.w.at = v
		}
	}
	c.retire()
}

func (c *cache) markCurrent() {
	now := c.now()
	if !c.current {
		c.currentSince = now
	}
	c.current = true
	c.lastGood = now
}

// disconnected records that the stream is down: the cache now ages.
func (c *cache) disconnected() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.current {
		c.current = false
		c.lastGood = c.now()
		c.currentSince = c.lastGood
	}
}

// age is how long ago the cache was last known current; 0 while it is.
func (c *cache) age() time.Duration {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.current {
		return 0
	}
	return c.now().Sub(c.lastGood)
}

func (c *cache) token() string {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if !c.ready {
		return ""
	}
	return c.at.String()
}

// list returns the view matching f, sorted; ok is false before the first snapshot.
// The slice may be shared with the cache and other callers: it must not be modified.
func (c *cache) list(f endpoint.Filter) ([]endpoint.Endpoint, bool) {
	eps, ok := c.sorted(f.Service)
	if !ok || (endpoint.Any(f.Cluster) && endpoint.Any(f.Protocol) && endpoint.Any(f.Address)) {
		return eps, ok
	}
	f = f.Normalize()
	out := make([]endpoint.Endpoint, 0)
	for _, e := range eps {
		if f.Match(e) {
			out = append(out, e)
		}
	}
	return out, true
}

// sorted returns the sorted view of one service, or of all when name is a wildcard.
// The fast path takes only the read lock and allocates nothing.
func (c *cache) sorted(name string) ([]endpoint.Endpoint, bool) {
	all := endpoint.Any(name)
	f := endpoint.Filter{Service: name}
	c.mu.RLock()
	if !c.ready || !covers(c.covered, f) {
		c.mu.RUnlock()
		return nil, false
	}
	if all && c.allOK {
		out := c.all
		c.mu.RUnlock()
		return out, true
	}
	if !all {
		s := c.svcs[name]
		if s == nil || s.ok {
			var out []endpoint.Endpoint
			if s != nil {
				out = s.sorted
			}
			c.mu.RUnlock()
			return out, true
		}
	}
	c.mu.RUnlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	if !covers(c.covered, f) { // the set shrank meanwhile
		return nil, false
	}
	if all {
		if !c.allOK {
			n := 0
			for _, s := range c.svcs {
				n += len(s.eps)
			}
			c.all = make([]endpoint.Endpoint, 0, n)
			for _, s := range c.svcs {
				for _, e := range s.eps {
					c.all = append(c.all, e)
				}
			}
			endpoint.Sort(c.all)
			c.allOK = true
		}
		return c.all, true
	}
	s := c.svcs[name]
	if s == nil {
		return nil, true
	}
	if !s.ok {
		// A new slice every time: callers may still hold the old one.
		s.sorted = make([]endpoint.Endpoint, 0, len(s.eps))
		for _, e := range s.eps {
			s.sorted = append(s.sorted, e)
		}
		endpoint.Sort(s.sorted)
		s.ok = true
	}
	return s.sorted, true
}

// overlaid applies this client's overlaid writes to a list read from the registrar;
// the registry.Front filters and sorts the result, as it does every driver's List.
func (c *cache) overlaid(eps []endpoint.Endpoint) []endpoint.Endpoint {
	c.mu.RLock()
	byKey := make(map[endpoint.Key]endpoint.Endpoint, len(eps))
	for _, e := range eps {
		byKey[e.Key()] = e
	}
	for k, w := range c.own {
		if !w.overlay {
			continue
		}
		if w.op.Kind == registry.OpRegister {
			byKey[k] = w.op.Endpoint
		} else {
			delete(byKey, k)
		}
	}
	c.mu.RUnlock()
	out := make([]endpoint.Endpoint, 0, len(byKey))
	for _, e := range byKey {
		out = append(out, e)
	}
	return out
}

// newScope names a set of services the client asks the registrar for. Callers
// hold c.mu.
func (c *cache) newScope(set map[string]struct{}) uint64 {
	c.lastScope++
	c.scopes[c.lastScope] = set
	return c.lastScope
}

// settled reports whether the cache holds every endpoint f can match and will go
// on holding them: no set asked for since the one it holds leaves f's service out.
// A watch starts only then, so that it never sees a service vanish and return
// while the sets change. Callers hold c.mu.
func (c *cache) settled(f endpoint.Filter) bool {
	if !covers(c.covered, f) {
		return false
	}
	for id, set := range c.scopes {
		if id > c.coveredID && !covers(set, f) {
			return false
		}
	}
	return true
}

// scopeSet is the set a snapshot ending with scopeID holds: every service for an
// unscoped stream (id 0). Earlier ids are forgotten: the registrar answers the
// sets in the order they were sent. Callers hold c.mu.
func (c *cache) scopeSet(id uint64) map[string]struct{} {
	if id == 0 {
		return nil
	}
	set := c.scopes[id]
	for k := range c.scopes {
		if k < id {
			delete(c.scopes, k)
		}
	}
	return set
}

// coveredScope returns the set base holds and an id for it, to resume a scoped
// stream from the cache's token; before the first snapshot it returns ok false.
func (c *cache) coveredScope() (set map[string]struct{}, id uint64, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.ready {
		return nil, 0, false
	}
	return c.covered, c.newScope(c.covered), true
}
