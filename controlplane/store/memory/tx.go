package memory

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/switchboard-mesh/switchboard/controlplane/store"
)

// tx is a transaction in progress. From its first write to its end it holds the
// store's write lock, so its writes go straight into the maps; each write first
// records how to undo itself, and a failed transaction (or a failed nested one)
// replays those records backwards. That costs in proportion to what the transaction
// wrote, not to the size of the store, which a copy-on-begin snapshot would.
//
// The lock is taken at the first write rather than at the start, as SQLite's deferred
// transactions do: reads before it take the read lock per call, like reads outside a
// transaction, so a transaction that is slow to decide (or only reads) keeps nobody
// waiting.
type tx struct {
	done   atomic.Bool // set when Atomically returns; the lock is no longer held
	locked bool        // holds s.mu; only the transaction's goroutine reads it
	undo   []undoStep
}

// undoStep undoes one write: fn, or for a route — the writes a fleet makes by the
// million — a step held in the slice itself, so that recording it allocates nothing.
type undoStep struct {
	fn    func()
	op    routeUndo
	tbl   *routeTable
	route store.Route // the route to put back (routePut), or its id
}

type routeUndo uint8

const (
	routePut    routeUndo = iota + 1 // put route back
	routeRemove                      // remove route.ID
	routeCreate                      // remove route.ID and hand its id out again
)

func (u *undoStep) run() {
	switch u.op {
	case routePut:
		u.tbl.put(u.route, false)
	case routeRemove:
		u.tbl.remove(u.route.ID, false)
	case routeCreate:
		u.tbl.remove(u.route.ID, false)
		u.tbl.nextID = u.route.ID - 1
	default:
		u.fn()
	}
}

// undoSlices keeps the undo logs of finished transactions for the next ones: a
// reconciler pass records a step per route it writes, thousands a second.
var undoSlices = sync.Pool{New: func() any { return new([]undoStep) }}

// maxPooledUndo bounds the log kept for reuse (a planning step that rewrote a million
// routes does not pin its log).
const maxPooledUndo = 1 << 14

// txKey finds this store's transaction in a context. It holds the store so that a
// context carrying a transaction of one store means nothing to another.
type txKey struct{ s *Store }

func (s *Store) txOf(ctx context.Context) *tx {
	t, _ := ctx.Value(txKey{s}).(*tx)
	return t
}

// Atomically implements store.Store.
func (s *Store) Atomically(ctx context.Context, fn func(ctx context.Context) error) error {
	if t := s.txOf(ctx); t != nil {
		if t.done.Load() {
			return store.ErrTxDone
		}
		return t.run(ctx, fn)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.RLock()
	closed := s.closed
	s.mu.RUnlock()
	if closed {
		return store.ErrClosed
	}
	log := undoSlices.Get().(*[]undoStep)
	t := &tx{undo: (*log)[:0]}
	defer func() {
		t.done.Store(true)
		if t.locked {
			s.mu.Unlock()
		}
		if cap(t.undo) <= maxPooledUndo {
			clear(t.undo) // beyond its length, a rollback cleared it
			*log = t.undo[:0]
			undoSlices.Put(log)
		}
	}()
	return t.run(context.WithValue(ctx, txKey{s}, t), fn)
}

// run calls fn and undoes what it wrote if it fails or panics. Writes of a nested
// run that succeeds stay recorded, so the enclosing one can still undo them.
func (t *tx) run(ctx context.Context, fn func(context.Context) error) error {
	mark := len(t.undo)
	ok := false
	defer func() {
		if !ok {
			t.rollbackTo(mark)
		}
	}()
	if err := fn(ctx); err != nil {
		return err
	}
	ok = true
	return nil
}

func (t *tx) rollbackTo(mark int) {
	for i := len(t.undo) - 1; i >= mark; i-- {
		t.undo[i].run()
		t.undo[i] = undoStep{}
	}
	t.undo = t.undo[:mark]
}

// record adds an undo step; a no-op outside a transaction.
func (t *tx) record(undo func()) {
	if t != nil {
		t.undo = append(t.undo, undoStep{fn: undo})
	}
}

// recordRoute adds a route's undo step; a no-op outside a transaction.
func (t *tx) recordRoute(op routeUndo, tbl *routeTable, r store.Route) {
	if t != nil {
		t.undo = append(t.undo, undoStep{op: op, tbl: tbl, route: r})
	}
}

// keep records how to restore m[k] as it is now; a no-op outside a transaction.
func keep[K comparable, V any](t *tx, m map[K]V, k K) {
	if t == nil {
		return
	}
	old, had := m[k]
	t.record(func() {
		if had {
			m[k] = old
		} else {
			delete(m, k)
		}
	})
}

// keepAll records how to restore every table, before a reset replaces them.
func (s *Store) keepAll(t *tx) {
	if t == nil {
		return
	}
	nodes, links, routes, segs, secrets := s.nodes, s.links, s.routes, s.segments, s.secrets
	t.record(func() {
		s.nodes, s.links, s.routes, s.segments, s.secrets = nodes, links, routes, segs, secrets
	})
}
