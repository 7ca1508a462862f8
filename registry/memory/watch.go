package memory

import (
	"context"
	"sync"

	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/registry"
)

// Watch sends the matching endpoints as Added, then Synced, then every change. Each
// watcher has its own unbounded queue, so a slow reader never blocks writers or other
// watchers and never loses an event.
func (r *Registry) Watch(ctx context.Context, f endpoint.Filter) (<-chan registry.Event, error) {
	f = f.Normalize()
	w := &watcher{filter: f, out: make(chan registry.Event), signal: make(chan struct{}, 1), quit: make(chan struct{})}
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil, registry.ErrClosed
	}
	// The initial state is queued under the same lock as later changes, so nothing
	// falls between the snapshot and the feed.
	now := r.now()
	initial := make([]endpoint.Endpoint, 0)
	for _, e := range r.entries {
		if !e.expired(now) && f.Match(e.ep) {
			initial = append(initial, e.ep.Clone())
		}
	}
	endpoint.Sort(initial)
	for _, ep := range initial {
		w.queue = append(w.queue, registry.Event{Type: registry.Added, Endpoint: ep})
	}
	w.queue = append(w.queue, registry.Event{Type: registry.Synced})
	r.watchers[w] = struct{}{}
	r.mu.Unlock()

	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		w.run(ctx)
		r.mu.Lock()
		delete(r.watchers, w)
		r.mu.Unlock()
	}()
	return w.out, nil
}

// notify queues ev for every watcher whose filter matches. Callers hold r.mu.
func (r *Registry) notify(ev registry.Event) {
	for w := range r.watchers {
		if w.filter.Match(ev.Endpoint) {
			w.push(ev.Endpoint.Clone(), ev.Type)
		}
	}
}

type watcher struct {
	filter endpoint.Filter
	out    chan registry.Event
	signal chan struct{}
	quit   chan struct{}
	once   sync.Once

	mu    sync.Mutex
	queue []registry.Event
}

func (w *watcher) push(ep endpoint.Endpoint, t registry.EventType) {
	w.mu.Lock()
	w.queue = append(w.queue, registry.Event{Type: t, Endpoint: ep})
	w.mu.Unlock()
	select {
	case w.signal <- struct{}{}:
	default:
	}
}

func (w *watcher) stop() { w.once.Do(func() { close(w.quit) }) }

// run hands queued events to the reader in order until the watch ends.
func (w *watcher) run(ctx context.Context) {
	defer close(w.out)
	for {
		w.mu.Lock()
		batch := w.queue
		w.queue = nil
		w.mu.Unlock()
		for _, ev := range batch {
			select {
			case w.out <- ev:
			case <-ctx.Done():
				return
			case <-w.quit:
				return
			}
		}
		select {
		case <-w.signal:
		case <-ctx.Done():
			return
		case <-w.quit:
			return
		}
	}
}
