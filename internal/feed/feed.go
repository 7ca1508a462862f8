// Package feed is the event queue behind an in-process Watch (the memory backend, the
// registrar client's cache): unbounded and ordered, so a slow reader holds up no
// writer and loses nothing, drained by one goroutine per watcher.
package feed

import (
	"context"
	"sync"

	"github.com/switchboard-mesh/switchboard/registry"
)

// Queue buffers events for one reader. Push never blocks; Run hands the events to the
// reader in order.
type Queue struct {
	out    chan registry.Event
	signal chan struct{}
	quit   chan struct{}
	once   sync.Once

	mu    sync.Mutex
	queue []registry.Event
}

// New returns an empty queue; start Run to deliver.
func New() *Queue {
	return &Queue{out: make(chan registry.Event), signal: make(chan struct{}, 1), quit: make(chan struct{})}
}

// C is the reader's channel; it is closed when Run returns.
func (q *Queue) C() <-chan registry.Event { return q.out }

// Push queues ev.
func (q *Queue) Push(ev registry.Event) {
	q.mu.Lock()
	q.queue = append(q.queue, ev)
	q.mu.Unlock()
	select {
	case q.signal <- struct{}{}:
	default: // a wake-up is already pending
	}
}

// Stop ends Run (and so the reader's channel) whatever is still queued.
func (q *Queue) Stop() { q.once.Do(func() { close(q.quit) }) }

// Run delivers queued events in order until ctx ends or Stop is called.
func (q *Queue) Run(ctx context.Context) {
	defer close(q.out)
	for {
		q.mu.Lock()
		batch := q.queue
		q.queue = nil
		q.mu.Unlock()
		for _, ev := range batch {
			select {
			case q.out <- ev:
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
