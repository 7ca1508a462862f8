// Package feed is the event queue behind an in-process Watch (the memory backend, the
// registrar client's cache): ordered, never blocking a writer, and bounded. A reader
// that falls more than Limit events behind is resynced rather than buffered without
// end: from then on the queue keeps one net change per endpoint (what an informer's
// resync would send), so its size is bounded by the endpoints that changed, not by
// the changes, and the reader still ends up with the writer's state.
package feed

import (
	"context"
	"sync"

	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/registry"
)

// DefaultLimit is how many events a queue holds in order before it coalesces.
const DefaultLimit = 4096

// Queue buffers events for one reader. Push never blocks; Run hands the events to the
// reader in order.
type Queue struct {
	out    chan registry.Event
	signal chan struct{}
	quit   chan struct{}
	once   sync.Once
	limit  int

	mu    sync.Mutex
	queue []slot
	// index is set while the queue coalesces: the slot of each endpoint's pending
	// change. dead counts the slots emptied by a change that cancelled out.
	index map[endpoint.Key]int
	dead  int
}

// slot is one queued event; a zero Type marks a slot whose change cancelled out
// (an Added the reader never saw, then Removed).
type slot struct{ ev registry.Event }

// New returns an empty queue with DefaultLimit; start Run to deliver.
func New() *Queue { return NewWithLimit(DefaultLimit) }

// NewWithLimit returns an empty queue that keeps up to limit events in order.
func NewWithLimit(limit int) *Queue {
	return &Queue{out: make(chan registry.Event), signal: make(chan struct{}, 1), quit: make(chan struct{}), limit: max(limit, 1)}
}

// C is the reader's channel; it is closed when Run returns.
func (q *Queue) C() <-chan registry.Event { return q.out }

// Len is the number of events waiting (not counting those Run is delivering).
func (q *Queue) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.queue) - q.dead
}

// Push queues ev.
func (q *Queue) Push(ev registry.Event) {
	q.mu.Lock()
	if q.index == nil && len(q.queue) >= q.limit {
		q.coalesce()
	}
	if q.index != nil {
		q.merge(ev)
	} else {
		q.queue = append(q.queue, slot{ev})
	}
	q.mu.Unlock()
	select {
	case q.signal <- struct{}{}:
	default: // a wake-up is already pending
	}
}

// coalesce rebuilds the queue as one net change per endpoint, in the order each
// endpoint first appears, and keeps merging until Run takes the queue.
func (q *Queue) coalesce() {
	old := q.queue
	q.queue, q.index, q.dead = make([]slot, 0, len(old)), map[endpoint.Key]int{}, 0
	for _, s := range old {
		if s.ev.Type != 0 {
			q.merge(s.ev)
		}
	}
}

// merge folds ev into the endpoint's pending change, if any. The pending change
// tells what the reader held before it: nothing (Added) or an endpoint
// (Updated, Removed).
func (q *Queue) merge(ev registry.Event) {
	if ev.Type == registry.Synced {
		q.queue = append(q.queue, slot{ev})
		return
	}
	k := ev.Endpoint.Key()
	i, ok := q.index[k]
	if !ok || q.queue[i].ev.Type == 0 {
		// Nothing pending for the endpoint, or a change that cancelled out: the
		// event is news to the reader as it is.
		q.index[k] = len(q.queue)
		q.queue = append(q.queue, slot{ev})
		return
	}
	prev := &q.queue[i].ev
	readerHad := prev.Type != registry.Added
	switch {
	case ev.Type == registry.Removed && !readerHad:
		*prev = registry.Event{} // added and removed before the reader saw it
		q.dead++
	case ev.Type == registry.Removed:
		*prev = ev
	case readerHad:
		*prev = registry.Event{Type: registry.Updated, Endpoint: ev.Endpoint}
	default:
		*prev = registry.Event{Type: registry.Added, Endpoint: ev.Endpoint}
	}
	q.compact()
}

// compact drops the emptied slots once they are half the queue.
func (q *Queue) compact() {
	if q.dead*2 <= len(q.queue) || q.dead < 64 {
		return
	}
	kept := q.queue[:0]
	clear(q.index)
	for _, s := range q.queue {
		if s.ev.Type == 0 {
			continue
		}
		if s.ev.Type != registry.Synced {
			q.index[s.ev.Endpoint.Key()] = len(kept)
		}
		kept = append(kept, s)
	}
	clear(q.queue[len(kept):])
	q.queue, q.dead = kept, 0
}

// Stop ends Run (and so the reader's channel) whatever is still queued.
func (q *Queue) Stop() { q.once.Do(func() { close(q.quit) }) }

// Run delivers queued events in order until ctx ends or Stop is called.
func (q *Queue) Run(ctx context.Context) {
	defer close(q.out)
	for {
		q.mu.Lock()
		batch := q.queue
		q.queue, q.index, q.dead = nil, nil, 0
		q.mu.Unlock()
		for _, s := range batch {
			if s.ev.Type == 0 {
				continue
			}
			select {
			case q.out <- s.ev:
			case <-ctx.Done():
				return
			case <-q.quit:
				return
			}
		}
		select {
		case <-q.signal:
		case <-ctx.Done():
			return
		case <-q.quit:
			return
		}
	}
}
