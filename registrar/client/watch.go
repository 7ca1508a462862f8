package client

import (
	"context"
	"errors"

	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/internal/feed"
	"github.com/switchboard-mesh/switchboard/registry"
)

// watcher is one local Watch. Its queue (internal/feed) never blocks the cache: a
// slow reader holds up no one, and one far behind gets each endpoint's net change
// instead of every step, so its queue is bounded by the endpoints.
type watcher struct {
	filter endpoint.Filter
	*feed.Queue
	synced bool // the initial state has been queued; guarded by the cache's mu
}

// Watch sends the matching endpoints as Added, then Synced, then every change of the
// view. Before the first snapshot has arrived it waits for it, so the initial state
// is never a partial one; a scoped client first widens its set to the watch's
// service and waits for the snapshot of the new set.
func (c *driver) Watch(ctx context.Context, f endpoint.Filter) (<-chan registry.Event, error) {
	if c.opts.OneShot {
		return nil, errors.New("registrar client: a one-shot client keeps no watch stream")
	}
	w := &watcher{filter: f, Queue: feed.New()}
	c.cache.mu.Lock()
	c.cache.watchers[w] = struct{}{}
	c.watched(w.filter)
	if c.cache.ready && c.cache.settled(w.filter) {
		c.cache.sendInitial(w)
	}
	c.wg.Add(1) // Close waits for the goroutine to be done with the cache
	c.cache.mu.Unlock()
	c.kickScope()
	go func() {
		defer c.wg.Done()
		w.Run(ctx)
		c.cache.mu.Lock()
		delete(c.cache.watchers, w)
		c.unwatched(w.filter)
		c.cache.mu.Unlock()
		c.kickScope()
	}()
	return w.C(), nil
}

// sendInitial queues the current view for a new watcher. Callers hold c.mu.
func (c *cache) sendInitial(w *watcher) {
	var initial []endpoint.Endpoint
	for _, s := range c.svcs {
		for _, e := range s.eps {
			if w.filter.Match(e) {
				initial = append(initial, e)
			}
		}
	}
	endpoint.Sort(initial)
	for _, e := range initial {
		w.Push(registry.Event{Type: registry.Added, Endpoint: e.Clone()})
	}
	w.Push(registry.Event{Type: registry.Synced})
	w.synced = true
}

// notify queues ev for every synced watcher it matches. Callers hold c.mu.
func (c *cache) notify(ev registry.Event) {
	for w := range c.watchers {
		if !w.filter.Match(ev.Endpoint) {
			continue
		}
		if w.synced {
			w.Push(registry.Event{Type: ev.Type, Endpoint: ev.Endpoint.Clone()})
		}
	}
}
