package memory

import (
	"context"
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
	undo   []func()
}

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
	t := &tx{}
	defer func() {
		t.done.Store(true)
		if t.locked {
			s.mu.Unlock()
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
		t.undo[i]()
	}
	t.undo = t.undo[:mark]
}

// record adds an undo step; a no-op outside a transaction.
func (t *tx) record(undo func()) {
	if t != nil {
		t.undo = append(t.undo, undo)
	}
}

// keep records how to restore m[k] as it is now; a no-op outside a transaction.
func keep[K comparable, V any](t *tx, m map[K]V, k K) {
	if t == nil {
		return
	}
	old, had := m[k]
	t.undo = append(t.undo, func() {
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
	t.undo = append(t.undo, func() {
		s.nodes, s.links, s.routes, s.segments, s.secrets = nodes, links, routes, segs, secrets
	})
}
