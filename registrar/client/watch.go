package client

import (
	"context"
	"sync"

	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/registry"
)

// watcher is one local Watch. Its queue is unbounded: the events come from this
// process's own cache, a slow reader holds up no one, and nothing is dropped.
type watcher struct {
	filter endpoint.Filter
	out    chan registry.Event
	signal chan struct{}
	quit   chan struct{}
	once   sync.Once

	mu     sync.Mutex
	queue  []registry.Event
	synced bool // the initial state has been queued
}

// Watch sends the matching endpoints as Added, then Synced, then every change of the
// view. Before the first snapshot has arrived it waits for it, so the initial state
// is never a partial one.
func (c *Client) Watch(ctx context.Context, f endpoint.Filter) (<-chan registry.Event, error) {
	if c.closed.Load() {
		return nil, registry.ErrClosed
	}
	w := &watcher{filter: f.Normalize(), out: make(chan registry.Event), signal: make(chan struct{}, 1), quit: make(chan struct{})}
	c.cache.mu.Lock()
	if c.closed.Load() {
		c.cache.mu.Unlock()
		return nil, registry.ErrClosed
	}
	c.cache.watchers[w] = struct{}{}
	if c.cache.ready {
		c.cache.sendInitial(w)
	}
	c.wg.Add(1) // under the lock, so that Close (which takes it first) waits for us
	c.cache.mu.Unlock()
	go func() {
		defer c.wg.Done()
		w.run(ctx)
		c.cache.mu.Lock()
		delete(c.cache.watchers, w)
		c.cache.mu.Unlock()
	}()
	return w.out, nil
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
	w.mu.Lock()
	for _, e := range initial {
		w.queue = append(w.queue, registry.Event{Type: registry.Added, Endpoint: e.Clone()})
	}
	w.queue = append(w.queue, registry.Event{Type: registry.Synced})
	w.synced = true
	w.mu.Unlock()
	w.poke()
}

// notify queues ev for every synced watcher it matches. Callers hold c.mu.
func (c *cache) notify(ev registry.Event) {
	for w := range c.watchers {
		if !w.filter.Match(ev.Endpoint) {
			continue
		}
		w.mu.Lock()
		if w.synced {
			w.queue = append(w.queue, registry.Event{Type: ev.Type, Endpoint: ev.Endpoint.Clone()})
		}
		w.mu.Unlock()
		w.poke()
	}
}

func (w *watcher) poke() {
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
