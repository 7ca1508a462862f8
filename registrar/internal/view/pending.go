package view

import (
	"errors"
	"fmt"

	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/internal/wire"
	"github.com/switchboard-mesh/switchboard/registrar/token"
	"github.com/switchboard-mesh/switchboard/registry"
)

// ErrQueueFull is returned when accepting a write would exceed the bounded queue; the
// API turns it into RESOURCE_EXHAUSTED so the agent retries instead of losing it.
var ErrQueueFull = errors.New("write queue full")

// Trace is the trace of an accepted write request, which its ops keep until a
// batch persists them; the registrar's tracing implements it.
type Trace interface {
	// Fanout records the fan-out of change t of key k at version v, under the
	// view's lock, and returns the trace context the event carries (a W3C
	// traceparent).
	Fanout(t wire.EventType, k endpoint.Key, v token.Version) string
}

// maxPendTraces bounds the traces one pending key keeps for its batch: a key
// rewritten many times before a batch takes it links its batch to the first
// ones only.
const maxPendTraces = 16

// addTraces appends trs to dst, up to maxPendTraces in all.
func addTraces(dst []Trace, trs ...Trace) []Trace {
	for _, tr := range trs {
		if len(dst) >= maxPendTraces {
			break
		}
		dst = append(dst, tr)
	}
	return dst
}

// BatchOp is one op of a batch, with the write id that was current when it was
// taken, and the traces of the writes it persists (nil if none is traced): Op's
// and those of the writes to the key it replaced since the last batch.
type BatchOp struct {
	Op     registry.Op
	ID     uint64
	Traces []Trace
}

// Check vets one op of a write request under the view's lock, with the endpoint
// its key holds now (nil if none).
type Check func(i int, op registry.Op, cur *endpoint.Endpoint) error

// Accept takes validated writes into the snapshot at once (broadcasting them) and
// queues them for the writer. All or none are accepted: check, when set, runs first
// on every op, under the same lock as the writes, and its first error refuses the
// whole request. A request traced as tr (nil: not traced) has its ops remember tr
// until they are persisted, and the events they cause carry the trace context of
// their fan-out. It returns the version at which the writes are visible.
func (s *View) Accept(ops []registry.Op, check Check, tr Trace) (token.Version, error) {
	s.mu.Lock()
	defer s.unlock()
	if check != nil {
		for i, op := range ops {
			var cur *endpoint.Endpoint
			if e := s.entries[op.Endpoint.Key()]; e != nil {
				cur = &e.ep
			}
			if err := check(i, op, cur); err != nil {
				return token.Version{}, err
			}
		}
	}
	fresh := 0
	seen := make(map[endpoint.Key]struct{}, len(ops))
	for _, op := range ops {
		k := op.Endpoint.Key()
		if _, ok := s.pending[k]; ok {
			continue
		}
		if _, ok := seen[k]; !ok {
			seen[k] = struct{}{}
			fresh++
		}
	}
	if len(s.pending)+fresh > s.cfg.MaxQueue {
		return token.Version{}, fmt.Errorf("%w: %d writes waiting to be persisted, limit %d", ErrQueueFull, len(s.pending), s.cfg.MaxQueue)
	}
	s.origin = tr
	for _, op := range ops {
		s.acceptOne(op)
	}
	s.origin = nil
	s.acked = s.seq
	s.queueDepth()
	select {
	case s.work <- struct{}{}:
	default:
	}
	return s.current(), nil
}

// acceptOne takes one write. A rewrite of a pending key replaces its op and keeps
// its record: the key stays protected from its oldest unpersisted write on.
func (s *View) acceptOne(op registry.Op) {
	k := op.Endpoint.Key()
	s.writeID++
	p := s.pending[k]
	fresh := p == nil
	if fresh {
		p = &pend{}
		s.pending[k] = p
	}
	p.op, p.id = op, s.writeID
	if s.origin != nil {
		p.traces = addTraces(p.traces, s.origin)
	}
	s.markDirty(k, p)
	s.recompute(k)
	switch {
	case fresh:
		p.since = s.seq // the version this write is acknowledged with
		s.track(k, p)
	case p.next == 0:
		p.next = s.seq
	}
}

func (s *View) markDirty(k endpoint.Key, p *pend) {
	if !p.dirty {
		p.dirty = true
		s.dirty = append(s.dirty, k)
		s.ndirty++
	}
}

// DirtyCount is the number of writes waiting for a batch.
func (s *View) DirtyCount() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.ndirty
}

// PendingCount is the number of accepted writes not yet confirmed persisted.
func (s *View) PendingCount() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(s.pending)
}

// TakeBatch hands the writer up to limit waiting writes (every one when limit is 0),
// one op per key, in arrival order; the rest wait for the next batch.
func (s *View) TakeBatch(limit int) []BatchOp {
	s.mu.Lock()
	defer s.unlock()
	n := s.ndirty
	if limit > 0 {
		n = min(n, limit)
	}
	out := make([]BatchOp, 0, n)
	i := 0
	for ; i < len(s.dirty) && len(out) < n; i++ {
		k := s.dirty[i]
		p := s.pending[k]
		if p == nil || !p.dirty {
			continue
		}
		p.dirty, p.next = false, 0
		out = append(out, BatchOp{Op: p.op, ID: p.id, Traces: p.traces})
		s.expectEcho(k, p.op, p.id)
		p.traces = nil
	}
	s.dirty = append(s.dirty[:0], s.dirty[i:]...)
	s.ndirty -= len(out)
	return out
}

// BatchDone records the outcome of writing a batch. Keys in failed were not written:
// they wait for the next batch unless the failure is permanent (the backend rejected
// the endpoint), in which case the write is dropped and the snapshot reverts to the
// backend's value. Every other op is now in the backend.
func (s *View) BatchDone(batch []BatchOp, failed map[endpoint.Key]bool, permanent bool) (dropped int) {
	s.mu.Lock()
	defer s.unlock()
	touched := make([]endpoint.Key, 0, len(batch))
	for _, b := range batch {
		k := b.Op.Endpoint.Key()
		p := s.pending[k]
		current := p != nil && p.id == b.ID
		if failed[k] {
			s.forgetEcho(k, b.ID)
			if p != nil && !permanent && b.Traces != nil {
				// The batch that writes the key next persists these writes too.
				p.traces = addTraces(b.Traces, p.traces...)
			}
			switch {
			case !current:
				// A newer write to the key is already queued; it supersedes this one.
			case permanent:
				delete(s.pending, k)
				touched = append(touched, k)
				dropped++
			default:
				s.markDirty(k, p)
			}
			continue
		}
		s.gen++
		s.stamps[k] = s.gen
		s.echoConfirmed(k, b.ID, s.gen)
		s.backendDone(k, b.Op, b.ID) // echo.go
		switch {
		case current:
			delete(s.pending, k)
		case p != nil && p.next != 0:
			// Writes taken in this batch are persisted; the ones accepted since
			// still need protecting, from the first of them on.
			p.since, p.next = p.next, 0
			s.track(k, p)
		}
		touched = append(touched, k)
	}
	// Settle first, so that the events below carry the frontier this batch moved.
	s.settle()
	for _, k := range touched {
		s.recompute(k)
	}
	s.queueDepth()
	return dropped
}

// Work is poked whenever writes wait for a batch: the writer's wake-up.
func (s *View) Work() <-chan struct{} { return s.work }

func (s *View) queueDepth() {
	if s.cfg.QueueDepth != nil {
		s.cfg.QueueDepth(len(s.pending))
	}
}
