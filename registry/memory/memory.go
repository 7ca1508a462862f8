// Package memory is the embedded default registry: endpoints live in this process, with
// per-endpoint TTLs and a change feed. It needs no external service, which makes it the
// backend for demos, tests and single-node setups.
package memory

import (
	"container/heap"
	"context"
	"sync"
	"time"

	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/registry"
)

func init() {
	registry.RegisterBackend(registry.Backend{
		Name:        "memory",
		Description: "in-process store (the embedded default); state is lost when the process exits",
		Open: func(context.Context, registry.Config) (registry.Registry, error) {
			return New(), nil
		},
	})
}

// Registry is the in-memory backend. It is safe for concurrent use.
type Registry struct {
	mu        sync.RWMutex
	closed    bool
	entries   map[endpoint.Key]*entry
	byService map[string]map[endpoint.Key]*entry
	expiries  expiryHeap
	watchers  map[*watcher]struct{}

	wake chan struct{} // tells the expiry loop that the earliest deadline moved
	done chan struct{}
	wg   sync.WaitGroup
	now  func() time.Time
}

type entry struct {
	ep      endpoint.Endpoint
	expires time.Time // zero: never
}

var (
	_ registry.Registry = (*Registry)(nil)
	_ registry.Watcher  = (*Registry)(nil)
)

// New returns an empty registry whose expiry loop runs until Close.
func New() *Registry {
	r := &Registry{
		entries:   map[endpoint.Key]*entry{},
		byService: map[string]map[endpoint.Key]*entry{},
		watchers:  map[*watcher]struct{}{},
		wake:      make(chan struct{}, 1),
		done:      make(chan struct{}),
		now:       time.Now,
	}
	r.wg.Add(1)
	go r.expireLoop()
	return r
}

// Apply validates and applies a batch atomically: readers and watchers see all of it
// or none of it, and a key written twice counts once (last op wins).
func (r *Registry) Apply(ctx context.Context, ops []registry.Op) error {
	if err := registry.Validate(ops); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	ops = registry.Coalesce(ops)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return registry.ErrClosed
	}
	now := r.now()
	for _, op := range ops {
		if op.Kind == registry.OpRegister {
			r.put(op.Endpoint.Clone(), now)
		} else {
			r.remove(op.Endpoint.Key())
		}
	}
	return nil
}

func (r *Registry) put(ep endpoint.Endpoint, now time.Time) {
	k := ep.Key()
	var expires time.Time
	if d := ep.TTL.Duration(); d > 0 {
		expires = now.Add(d)
		heap.Push(&r.expiries, expiry{at: expires, key: k})
		r.poke()
	}
	old, ok := r.entries[k]
	if ok && !old.expired(now) {
		changed := !endpoint.Equal(old.ep, ep)
		old.ep, old.expires = ep, expires
		if changed {
			r.notify(registry.Event{Type: registry.Updated, Endpoint: ep})
		}
		return
	}
	e := &entry{ep: ep, expires: expires}
	r.entries[k] = e
	svc := r.byService[k.Service]
	if svc == nil {
		svc = map[endpoint.Key]*entry{}
		r.byService[k.Service] = svc
	}
	svc[k] = e
	r.notify(registry.Event{Type: registry.Added, Endpoint: ep})
}

// remove deletes k and tells watchers. An entry past its deadline already counts as
// gone for List, but its removal event is still owed to watchers, who saw it added.
func (r *Registry) remove(k endpoint.Key) {
	e, ok := r.entries[k]
	if !ok {
		return
	}
	delete(r.entries, k)
	if svc := r.byService[k.Service]; svc != nil {
		delete(svc, k)
		if len(svc) == 0 {
			delete(r.byService, k.Service)
		}
	}
	r.notify(registry.Event{Type: registry.Removed, Endpoint: e.ep})
}

func (e *entry) expired(now time.Time) bool {
	return !e.expires.IsZero() && !now.Before(e.expires)
}

// List returns the matching live endpoints, sorted.
func (r *Registry) List(ctx context.Context, f endpoint.Filter) ([]endpoint.Endpoint, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	f = f.Normalize()
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.closed {
		return nil, registry.ErrClosed
	}
	candidates := r.entries
	if f.Service != "" {
		candidates = r.byService[f.Service]
	}
	now := r.now()
	out := make([]endpoint.Endpoint, 0, len(candidates))
	for _, e := range candidates {
		if !e.expired(now) && f.Match(e.ep) {
			out = append(out, e.ep.Clone())
		}
	}
	endpoint.Sort(out)
	return out, nil
}

// Close stops the expiry loop and ends every watch. It is idempotent.
func (r *Registry) Close() error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	close(r.done)
	for w := range r.watchers {
		w.Stop()
	}
	r.watchers = nil
	r.mu.Unlock()
	r.wg.Wait()
	return nil
}

// poke wakes the expiry loop without blocking; one pending wake-up is enough.
func (r *Registry) poke() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// expireLoop removes entries when their deadline passes, so watchers hear about
// expiries even when nobody calls List.
func (r *Registry) expireLoop() {
	defer r.wg.Done()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		r.mu.Lock()
		next := r.expireDue(r.now())
		r.mu.Unlock()
		wait := time.Hour
		if !next.IsZero() {
			wait = max(time.Until(next), time.Millisecond)
		}
		timer.Reset(wait)
		select {
		case <-r.done:
			return
		case <-r.wake:
		case <-timer.C:
		}
	}
}

// expireDue removes every entry whose deadline has passed and returns the next
// deadline (zero if none). Heap items can be stale — the entry was refreshed or
// removed since — and are skipped by comparing deadlines.
func (r *Registry) expireDue(now time.Time) time.Time {
	for len(r.expiries) > 0 {
		x := r.expiries[0]
		if now.Before(x.at) {
			return x.at
		}
		heap.Pop(&r.expiries)
		if e, ok := r.entries[x.key]; ok && e.expires.Equal(x.at) {
			r.remove(x.key)
		}
	}
	return time.Time{}
}

type expiry struct {
	at  time.Time
	key endpoint.Key
}

type expiryHeap []expiry

func (h expiryHeap) Len() int           { return len(h) }
func (h expiryHeap) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h expiryHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *expiryHeap) Push(x any)        { *h = append(*h, x.(expiry)) }
func (h *expiryHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
