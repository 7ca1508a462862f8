package registrar

import (
	"sync"

	"github.com/switchboard-mesh/switchboard/endpoint"
	registrarv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/registrar/v1"
	"github.com/switchboard-mesh/switchboard/internal/wire"
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
	// digest is the sum of the visible entries' sums (digest.go): the state's
	// digest at seq.
	digest uint64

	entries   map[endpoint.Key]*entry
	byCluster map[string]int
	// byService indexes entries by service, so a scoped watcher's snapshot reads
	// only its services, not the whole fleet. Keyed by the entry, not its key: a
	// pointer is an eighth of a key's size, and the collector scans one word, not
	// four strings, per entry (at 100,000 endpoints, 19.6 MB became 4.6).
	byService map[string]map[*entry]struct{}

	backend map[endpoint.Key]endpoint.Endpoint
	// stamps guard the backend view against stale full reads: a key changed at gen g
	// (by a watch event or a confirmed write) is left alone by a List that began
	// before g. syncs holds the start gens of full reads in progress.
	stamps map[endpoint.Key]uint64
	gen    uint64
	syncs  map[uint64]int
	// echoes are our writes whose echo the live change feed has not delivered
	// yet, per key, oldest first (echo.go).
	echoes   map[endpoint.Key][]echo
	feedLive bool

	pending map[endpoint.Key]*pend
	// accepted orders the pending keys by the version they are protected from;
	// its top gives the persisted frontier that events carry (frontier.go).
	accepted acceptedHeap
	acked    uint64         // the latest version a write was acknowledged with
	dirty    []endpoint.Key // keys waiting for the next batch, in arrival order
	ndirty   int
	writeID  uint64
	maxQueue int
	// origin is the trace of the write being accepted, while accept applies it;
	// nil when it is not traced (tracing.go).
	origin *writeTrace

	ring    []ringEvent
	changed bool // events were appended under the lock: signal the watchers

	// watching are the open watch streams, each signalled when events are appended.
	watchMu  sync.Mutex
	watching []*watcher
	toQueue  []*watcher // signalAll's, kept for the next

	snapMu sync.Mutex
	snap   *snapshot
	parts  *partition // the entries, by bucket of the full snapshot
	listMu sync.Mutex // one build of the unfiltered listing at a time
	listed *listing

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
	hash uint64 // of the key: picks the entry's bucket of the full snapshot
	sum  uint64 // of wire: the entry's term of the state digest
	slot int32  // the entry's index in its bucket
}

// pend is a key with accepted writes not yet confirmed persisted: the last of them
// (op, which the next batch writes) and the versions that protect them.
type pend struct {
	op    registry.Op
	id    uint64 // a later write to the same key gets a larger id
	since uint64 // the smallest version an unpersisted write was acknowledged with
	next  uint64 // the same for the writes accepted since the key was last taken into a batch; 0 if none
	dirty bool   // waiting for a batch; false while in flight
	// traces are the traces of the writes accepted since the key was last taken
	// into a batch (op and the ones it replaced), oldest first, at most
	// maxPendTraces; nil when none is traced (tracing.go).
	traces []*writeTrace
}

type ringEvent struct {
	seq       uint64
	persisted uint64 // the frontier the event carries
	digest    uint64 // the state's digest at seq
	typ       registrarv1.EndpointEvent_EventType
	service   string // of the changed endpoint; empty for PROGRESS, which every scope sees
	// msg is the event in wire form, shared by every watcher sent it.
	msg *shared
}

func newState(epoch uint64, history, maxQueue int, m *metrics) *state {
	return &state{
		epoch:     epoch,
		entries:   map[endpoint.Key]*entry{},
		byCluster: map[string]int{},
		byService: map[string]map[*entry]struct{}{},
		backend:   map[endpoint.Key]endpoint.Endpoint{},
		stamps:    map[endpoint.Key]uint64{},
		syncs:     map[uint64]int{},
		echoes:    map[endpoint.Key][]echo{},
		pending:   map[endpoint.Key]*pend{},
		parts:     newPartition(),
		maxQueue:  maxQueue,
		ring:      make([]ringEvent, history),
		ready:     make(chan struct{}),
		closing:   make(chan struct{}),
		work:      make(chan struct{}, 1),
		m:         m,
	}
}

// unlock releases the write lock, then, if events were appended, signals every
// watcher.
func (s *state) unlock() {
	changed := s.changed
	if changed {
		s.changed = false
		if s.onChange != nil {
			s.onChange()
		}
	}
	s.mu.Unlock()
	if changed {
		s.signalAll()
	}
}

// signalAll signals every watcher: a watcher that found nothing new before the
// signal looks again. Scoped watchers too: they report skipped changes as PROGRESS.
func (s *state) signalAll() {
	s.watchMu.Lock()
	queue := s.toQueue[:0]
	for _, w := range s.watching {
		if w.mark() {
			queue = append(queue, w)
		}
	}
	if len(queue) > 0 {
		queue[0].r.senders.push(queue...) // one lock for all of them
	}
	clear(queue)
	s.toQueue = queue
	s.watchMu.Unlock()
}

// stalled counts the watchers whose send under way began in period last or
// earlier (Registrar.period).
func (s *state) stalled(last int64) int {
	n := 0
	s.watchMu.Lock()
	for _, w := range s.watching {
		if at := w.sending.Load(); at != 0 && at <= last {
			n++
		}
	}
	s.watchMu.Unlock()
	return n
}

func (s *state) addWatcher(w *watcher) {
	s.watchMu.Lock()
	w.slot = int32(len(s.watching))
	s.watching = append(s.watching, w)
	s.watchMu.Unlock()
}

func (s *state) removeWatcher(w *watcher) {
	s.watchMu.Lock()
	last := len(s.watching) - 1
	moved := s.watching[last]
	s.watching[w.slot], moved.slot = moved, w.slot
	s.watching[last] = nil
	s.watching = s.watching[:last]
	s.watchMu.Unlock()
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
		e := &entry{ep: want, wire: wire.MarshalEndpoint(want)}
		s.put(k, e)
		s.count(k.Cluster, +1)
		s.emit(registrarv1.EndpointEvent_ENDPOINT_ADDED, k, e.wire)
	case ok && !endpoint.Equal(cur.ep, want):
		e := &entry{ep: want, wire: wire.MarshalEndpoint(want)}
		s.put(k, e)
		s.emit(registrarv1.EndpointEvent_ENDPOINT_UPDATED, k, e.wire)
	case !ok && cur != nil:
		s.drop(k)
		s.count(k.Cluster, -1)
		s.emit(registrarv1.EndpointEvent_ENDPOINT_REMOVED, k, cur.wire)
	}
}

func (s *state) put(k endpoint.Key, e *entry) {
	old := s.entries[k]
	if old != nil {
		s.digest -= old.sum
	}
	e.sum = entrySum(e.wire)
	s.digest += e.sum
	s.parts.put(k, old, e)
	s.entries[k] = e
	m := s.byService[k.Service]
	if m == nil {
		m = map[*entry]struct{}{}
		s.byService[k.Service] = m
	}
	delete(m, old)
	m[e] = struct{}{}
}

func (s *state) drop(k endpoint.Key) {
	e := s.entries[k]
	s.digest -= e.sum
	s.parts.drop(e)
	delete(s.entries, k)
	if m := s.byService[k.Service]; m != nil {
		delete(m, e)
		if len(m) == 0 {
			delete(s.byService, k.Service)
		}
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

// emit appends one change of key k to the history ring. The change of a traced
// write carries the trace context of its fan-out span (tracing.go).
func (s *state) emit(t registrarv1.EndpointEvent_EventType, k endpoint.Key, ew []byte) {
	p := s.persisted() // before the new version: it is never persisted yet
	s.seq++
	v := s.current()
	var traceparent string
	if s.origin != nil {
		traceparent = s.fanout(t, k, v)
	}
	s.ring[s.seq%uint64(len(s.ring))] = ringEvent{seq: s.seq, persisted: p, digest: s.digest, typ: t, service: k.Service, msg: share(wire.EncodeChange(wire.EventType(t), ew, v, p, traceparent, trackedCap))}
	s.changed = true
}

// announce appends a PROGRESS to the history ring when the frontier now covers a
// write that no event has reported persisted: one that changed nothing visible,
// so no event followed it. It is an event of its own, with its own version, so
// that only a message sent after a write can confirm it. It runs on a timer
// (Config.ProgressInterval), not after every batch: while writes keep coming, the
// next change carries the frontier anyway, and a quiet registrar sends at most one
// PROGRESS per interval to every watcher.
func (s *state) announce() {
	s.mu.Lock()
	defer s.unlock()
	p := s.persisted()
	if s.acked <= s.lastEvent().persisted || p < s.acked {
		return
	}
	s.seq++
	v := s.current()
	s.ring[s.seq%uint64(len(s.ring))] = ringEvent{seq: s.seq, persisted: p, digest: s.digest, typ: registrarv1.EndpointEvent_PROGRESS, msg: share(wire.EncodeProgress(v, p))}
	s.changed = true
}

// lastEvent is the latest event in the ring, zero before any.
func (s *state) lastEvent() ringEvent {
	if s.seq == 0 {
		return ringEvent{}
	}
	return s.ring[s.seq%uint64(len(s.ring))]
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

// current is the latest version, with the state's digest.
func (s *state) current() token.Version {
	return token.Version{Epoch: s.epoch, Seq: s.seq, Digest: s.digest, HasDigest: true}
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
