package registrar

import (
	"sync"

	"github.com/switchboard-mesh/switchboard/endpoint"
	registrarv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/registrar/v1"
	"github.com/switchboard-mesh/switchboard/registrar/token"
	"github.com/switchboard-mesh/switchboard/registry"
)

// state is the registrar's snapshot and everything that feeds it, under one lock so
// that a change, its version and its broadcast are one atomic step.
//
// What watchers see (entries) is the backend's state (backend, from polls, the
// native watch and our own confirmed writes) overlaid with the writes accepted but
// not yet confirmed persisted (pending). Every change of a key's visible value gets
// the next sequence number and one event in the history ring.
type state struct {
	mu    sync.RWMutex
	epoch uint64
	seq   uint64 // version of the latest event; 0 before any

	entries   map[endpoint.Key]*entry
	byCluster map[string]int

	backend map[endpoint.Key]endpoint.Endpoint
	// stamps guard the backend view against stale full reads: a key changed at gen g
	// (by a watch event or a confirmed write) is left alone by a List that began
	// before g. syncs holds the start gens of full reads in progress.
	stamps map[endpoint.Key]uint64
	gen    uint64
	syncs  map[uint64]int

	pending map[endpoint.Key]*pend
	// accepted lists pending writes in acceptance order; entries whose write is no
	// longer pending are dropped from the front lazily. Its head gives the
	// persisted frontier that events carry.
	accepted []acceptRec
	dirty    []endpoint.Key // keys waiting for the next batch, in arrival order
	ndirty   int
	writeID  uint64
	maxQueue int

	ring    []ringEvent
	wake    chan struct{} // closed (and replaced) when events are appended
	changed bool

	snapMu sync.Mutex
	snap   *snapshot

	ready    chan struct{} // closed after the first successful full read
	isReady  bool
	closing  chan struct{} // closed at shutdown: every watch stream ends
	work     chan struct{} // pokes the writer
	m        *metrics
	onChange func() // test hook, called under the lock after each locked mutation
}

type entry struct {
	ep   endpoint.Endpoint
	wire []byte // ep in wire form, shared by its events and by snapshots
}

// pend is one accepted write not yet confirmed persisted.
type pend struct {
	op    registry.Op
	id    uint64 // a later write to the same key gets a larger id
	seq   uint64 // the version before the write was accepted
	dirty bool   // waiting for a batch; false while in flight
}

type acceptRec struct {
	key endpoint.Key
	id  uint64
	seq uint64
}

type ringEvent struct {
	seq uint64
	typ registrarv1.EndpointEvent_EventType
	raw encoded
}

func newState(epoch uint64, history, maxQueue int, m *metrics) *state {
	return &state{
		epoch:     epoch,
		entries:   map[endpoint.Key]*entry{},
		byCluster: map[string]int{},
		backend:   map[endpoint.Key]endpoint.Endpoint{},
		stamps:    map[endpoint.Key]uint64{},
		syncs:     map[uint64]int{},
		pending:   map[endpoint.Key]*pend{},
		maxQueue:  maxQueue,
		ring:      make([]ringEvent, history),
		wake:      make(chan struct{}),
		ready:     make(chan struct{}),
		closing:   make(chan struct{}),
		work:      make(chan struct{}, 1),
		m:         m,
	}
}

// unlock releases the write lock, first waking every watcher if events were
// appended: closing one channel wakes them all at once.
func (s *state) unlock() {
	if s.changed {
		close(s.wake)
		s.wake = make(chan struct{})
		s.changed = false
		if s.onChange != nil {
			s.onChange()
		}
	}
	s.mu.Unlock()
}

// desired is what key k should look like: the pending write if any, else the backend.
func (s *state) desired(k endpoint.Key) (endpoint.Endpoint, bool) {
	if p := s.pending[k]; p != nil {
		if p.op.Kind == registry.OpRegister {
			return p.op.Endpoint, true
		}
		return endpoint.Endpoint{}, false
	}
	e, ok := s.backend[k]
	return e, ok
}

// recompute brings the visible entry of k in line with desired and records the
// change, if any, as one event.
func (s *state) recompute(k endpoint.Key) {
	want, ok := s.desired(k)
	cur := s.entries[k]
	switch {
	case ok && cur == nil:
		e := &entry{ep: want, wire: marshalEndpoint(want)}
		s.entries[k] = e
		s.count(k.Cluster, +1)
		s.emit(registrarv1.EndpointEvent_ENDPOINT_ADDED, e.wire)
	case ok && !endpoint.Equal(cur.ep, want):
		e := &entry{ep: want, wire: marshalEndpoint(want)}
		s.entries[k] = e
		s.emit(registrarv1.EndpointEvent_ENDPOINT_UPDATED, e.wire)
	case !ok && cur != nil:
		delete(s.entries, k)
		s.count(k.Cluster, -1)
		s.emit(registrarv1.EndpointEvent_ENDPOINT_REMOVED, cur.wire)
	}
}

func (s *state) count(cluster string, d int) {
	n := s.byCluster[cluster] + d
	if n == 0 {
		delete(s.byCluster, cluster)
	} else {
		s.byCluster[cluster] = n
	}
	s.m.endpointCount(cluster, n)
}

// emit appends one change to the history ring.
func (s *state) emit(t registrarv1.EndpointEvent_EventType, wire []byte) {
	s.seq++
	v := token.Version{Epoch: s.epoch, Seq: s.seq}
	s.ring[s.seq%uint64(len(s.ring))] = ringEvent{seq: s.seq, typ: t, raw: encodeChange(t, wire, v, s.persisted())}
	s.changed = true
}

// persisted is the frontier below which every accepted write is persisted or
// superseded: just before the oldest pending write, or the current version when
// none is pending. Callers hold the lock (a read lock will do).
func (s *state) persisted() uint64 {
	for _, a := range s.accepted {
		if p := s.pending[a.key]; p != nil && p.id == a.id {
			return a.seq
		}
	}
	return s.seq
}

// compactAccepted drops the records of writes no longer pending from the front.
// Callers hold the write lock.
func (s *state) compactAccepted() {
	n := 0
	for _, a := range s.accepted {
		if p := s.pending[a.key]; p != nil && p.id == a.id {
			break
		}
		n++
	}
	clear(s.accepted[:n])
	s.accepted = s.accepted[n:]
	if len(s.accepted) == 0 {
		s.accepted = nil
	}
}

// eventAt returns event n if the ring still holds it. Callers hold the lock.
func (s *state) eventAt(n uint64) (ringEvent, bool) {
	if n == 0 || n > s.seq || s.seq-n >= uint64(len(s.ring)) {
		return ringEvent{}, false
	}
	return s.ring[n%uint64(len(s.ring))], true
}

// canResume reports whether every event after seq is still in the ring.
func (s *state) canResume(seq uint64) bool {
	return seq <= s.seq && s.seq-seq <= uint64(len(s.ring))
}

func (s *state) current() token.Version { return token.Version{Epoch: s.epoch, Seq: s.seq} }

// list returns the visible endpoints that match f, sorted, and the version read.
func (s *state) list(f endpoint.Filter) ([]endpoint.Endpoint, token.Version) {
	f = f.Normalize()
	s.mu.RLock()
	out := make([]endpoint.Endpoint, 0, len(s.entries))
	for _, e := range s.entries {
		if f.Match(e.ep) {
			out = append(out, e.ep)
		}
	}
	v := s.current()
	s.mu.RUnlock()
	endpoint.Sort(out)
	return out, v
}

// counts returns the number of visible endpoints per cluster.
func (s *state) counts() map[string]int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make(map[string]int, len(s.byCluster))
	for c, n := range s.byCluster {
		out[c] = n
	}
	return out
}
