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
		Open: func(context.Context, registry.Config) (registry.Driver, error) {
			return newStore(), nil
		},
	})
}

// store is the in-memory driver. The registry.Front it is used through validates,
// admits and counts the calls; store only keeps the endpoints.
type store struct {
	mu        sync.RWMutex
	entries   map[endpoint.Key]*entry
	byService map[string]map[endpoint.Key]*entry
	expiries  expiryHeap
	watchers  map[*watcher]struct{}

	holds   map[registry.HoldID]bool // live holds (hold.go)
	holdSeq uint64

	wake chan struct{} // tells the expiry loop that the earliest deadline moved
	done chan struct{}
	wg   sync.WaitGroup // the expiry loop and the watchers' queues
	now  func() time.Time
}

type entry struct {
	ep      endpoint.Endpoint
	expires time.Time       // zero: never
	hold    registry.HoldID // the hold that keeps it alive instead of its TTL, if any
}

var (
	_ registry.WatchDriver  = (*store)(nil)
	_ registry.CachedLister = (*store)(nil)
	_ registry.Holder       = (*store)(nil)
)

// New returns an empty registry whose expiry loop runs until Close.
func New() *registry.Front { return registry.NewFront("memory", newStore()) }

func newStore() *store {
	r := &store{
		entries:   map[endpoint.Key]*entry{},
		byService: map[string]map[endpoint.Key]*entry{},
		watchers:  map[*watcher]struct{}{},
		holds:     map[registry.HoldID]bool{},
		wake:      make(chan struct{}, 1),
		done:      make(chan struct{}),
		now:       time.Now,
	}
	r.wg.Add(1)
	go r.expireLoop()
	return r
}

// Apply applies a batch atomically: readers and watchers see all of it or none of it.
func (r *store) Apply(_ context.Context, ops []registry.Op) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, op := range ops {
		if op.Hold != "" && !r.holds[op.Hold] {
			return unknownHold(op.Hold)
		}
	}
	now := r.now()
	for _, op := range ops {
		switch {
		case op.Kind == registry.OpRegister:
			r.put(op.Endpoint.Clone(), op.Hold, now)
		case op.Hold == "":
			r.remove(op.Endpoint.Key())
		default:
			if e := r.entries[op.Endpoint.Key()]; e != nil && e.hold == op.Hold {
				r.remove(op.Endpoint.Key())
			}
		}
	}
	return nil
}

func (r *store) put(ep endpoint.Endpoint, hold registry.HoldID, now time.Time) {
	k := ep.Key()
	var expires time.Time
	if d := ep.TTL.Duration(); d > 0 && hold == "" {
		expires = now.Add(d)
		heap.Push(&r.expiries, expiry{at: expires, key: k})
		r.poke()
	}
	old, ok := r.entries[k]
	if ok && !old.expired(now) {
		changed := !endpoint.Equal(old.ep, ep)
		old.ep, old.expires, old.hold = ep, expires, hold
		if changed {
			r.notify(registry.Event{Type: registry.Updated, Endpoint: ep})
		}
		return
	}
	if ok {
		// Expired, and not yet reaped by the loop: it is gone all the same, so
		// watchers hear of its removal before the new entry.
		r.remove(k)
	}
	e := &entry{ep: ep, expires: expires, hold: hold}
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
func (r *store) remove(k endpoint.Key) {
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

// List returns the matching live endpoints, sorted (ListCached).
func (r *store) List(_ context.Context, f endpoint.Filter) ([]endpoint.Endpoint, error) {
	eps, _ := r.ListCached(f)
	return eps, nil
}

// ListCached is List: everything is at hand. registry.Arrange filters and sorts
// the live entries of the service asked for (of all, without one); only the
// entries it keeps are then copied, as a copy costs an allocation each.
func (r *store) ListCached(f endpoint.Filter) ([]endpoint.Endpoint, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	candidates := r.entries
	if f.Service != "" {
		candidates = r.byService[f.Service]
	}
	now := r.now()
	out := make([]endpoint.Endpoint, 0, len(candidates))
	for _, e := range candidates {
		if !e.expired(now) {
			out = append(out, e.ep)
		}
	}
	out = registry.Arrange(out, f)
	for i := range out {
		out[i] = out[i].Clone()
	}
	return out, true
}

// Close stops the expiry loop. The Front has ended every watch before.
func (r *store) Close() error {
	close(r.done)
	r.wg.Wait()
	return nil
}

// poke wakes the expiry loop without blocking; one pending wake-up is enough.
func (r *store) poke() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// expireLoop removes entries when their deadline passes, so watchers hear about
// expiries even when nobody calls List.
func (r *store) expireLoop() {
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
func (r *store) expireDue(now time.Time) time.Time {
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
