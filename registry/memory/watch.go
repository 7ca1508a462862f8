package memory

import (
	"context"

	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/internal/feed"
	"github.com/switchboard-mesh/switchboard/registry"
)

// Watch sends the matching endpoints as Added, then Synced, then every change. Each
// watcher has its own queue (internal/feed), so a slow reader never blocks writers or
// other watchers; one far behind gets each endpoint's net change instead of every
// step, so the queue stays bounded by the endpoints and the reader still converges.
func (r *store) Watch(ctx context.Context, f endpoint.Filter) (<-chan registry.Event, error) {
	w := &watcher{filter: f, Queue: feed.New()}
	r.mu.Lock()
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
		w.Push(registry.Event{Type: registry.Added, Endpoint: ep})
	}
	w.Push(registry.Event{Type: registry.Synced})
	r.watchers[w] = struct{}{}
	r.wg.Add(1) // under the lock, with the watcher: Close waits for what it can see
	r.mu.Unlock()

	go func() {
		defer r.wg.Done()
		w.Run(ctx)
		r.mu.Lock()
		delete(r.watchers, w)
		r.mu.Unlock()
	}()
	return w.C(), nil
}

// notify queues ev for every watcher whose filter matches. Callers hold r.mu.
func (r *store) notify(ev registry.Event) {
	for w := range r.watchers {
		if w.filter.Match(ev.Endpoint) {
			w.Push(registry.Event{Type: ev.Type, Endpoint: ev.Endpoint.Clone()})
		}
	}
}

// watcher is one Watch: a filter and the queue its events wait in.
type watcher struct {
	filter endpoint.Filter
	*feed.Queue
}
