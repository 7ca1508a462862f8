package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"sync/atomic"

	"github.com/switchboard-mesh/switchboard/controlplane/store"
)

// querier is what *sql.DB and *sql.Tx share: every statement runs on the transaction
// the context carries, or on the database outside one.
type querier interface {
	ExecContext(ctx context.Context, q string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, q string, args ...any) *sql.Row
}

// txState is a transaction in progress: a real SQLite write transaction, with
// savepoints for the nested ones. It begins (IMMEDIATE, see pragmas: taking the write
// lock) at the first write rather than when Atomically starts. Reads before it run
// outside, on the latest committed state, so a transaction that is slow to decide
// (or only reads) keeps no writer waiting — and cannot fail at its first write
// because another writer committed after it began reading, which a DEFERRED SQLite
// transaction in WAL mode would (SQLITE_BUSY_SNAPSHOT).
type txState struct {
	ctx   context.Context // Atomically's: the transaction's lifetime
	tx    *sql.Tx         // nil until the first write
	q     *txQuerier      // tx's prepared statements
	s     *Store          // whose write lock tx holds
	done  atomic.Bool
	depth int // open savepoints
}

// txKey finds this store's transaction in a context; it holds the store so that a
// context carrying one store's transaction means nothing to another.
type txKey struct{ s *Store }

func (s *Store) txOf(ctx context.Context) *txState {
	t, _ := ctx.Value(txKey{s}).(*txState)
	return t
}

// q returns where ctx's reads run.
func (s *Store) q(ctx context.Context) querier {
	if t := s.txOf(ctx); t != nil && t.tx != nil {
		return t.q
	}
	return dbQuerier{s}
}

// w returns where ctx's writes run, beginning ctx's transaction if it has not yet.
func (s *Store) w(ctx context.Context) (querier, error) {
	t := s.txOf(ctx)
	if t == nil {
		return writeQuerier{dbQuerier{s}}, nil
	}
	if err := t.begin(s); err != nil {
		return nil, err
	}
	return t.q, nil
}

func (t *txState) begin(s *Store) error {
	if t.tx != nil {
		return nil
	}
	if err := s.lockWrites(t.ctx); err != nil {
		return err
	}
	tx, err := s.db.BeginTx(t.ctx, nil)
	if err != nil {
		s.unlockWrites()
		return fmt.Errorf("sqlite store: begin: %w", err)
	}
	t.tx, t.q, t.s = tx, newTxQuerier(s, tx), s
	return nil
}

// rollback ends the transaction unless it committed, and lets the next writer in.
func (t *txState) rollback() {
	if t.tx == nil {
		return
	}
	_ = t.tx.Rollback()
	t.tx, t.q = nil, nil
	t.s.unlockWrites()
}

// Atomically implements store.Store.
func (s *Store) Atomically(ctx context.Context, fn func(ctx context.Context) error) error {
	if t := s.txOf(ctx); t != nil {
		if t.done.Load() {
			return store.ErrTxDone
		}
		return t.savepoint(ctx, fn)
	}
	if err := s.check(ctx); err != nil {
		return err
	}
	t := &txState{ctx: ctx}
	defer func() {
		t.done.Store(true)
		t.rollback() // also on a panic in fn; after a commit, only the lock
	}()
	if err := fn(context.WithValue(ctx, txKey{s}, t)); err != nil {
		return err
	}
	if t.tx != nil {
		if err := t.tx.Commit(); err != nil {
			return fmt.Errorf("sqlite store: commit: %w", err)
		}
	}
	return nil
}

// savepoint runs a nested transaction: on failure only its own writes are undone.
// Before the first write there is nothing to protect; if fn makes it and then fails,
// the transaction it began is rolled back whole and the next write begins another.
func (t *txState) savepoint(ctx context.Context, fn func(context.Context) error) error {
	if t.tx == nil {
		ok := false
		defer func() {
			if !ok {
				t.rollback()
			}
		}()
		if err := fn(ctx); err != nil {
			return err
		}
		ok = true
		return nil
	}
	t.depth++
	defer func() { t.depth-- }()
	name := fmt.Sprintf("sp%d", t.depth)
	if _, err := t.tx.ExecContext(ctx, "SAVEPOINT "+name); err != nil {
		return wrap(err)
	}
	ok := false
	defer func() {
		if !ok {
			// ROLLBACK TO undoes the writes but leaves the savepoint open; RELEASE
			// closes it. Neither may be skipped because ctx ended.
			bg := context.WithoutCancel(ctx)
			_, _ = t.tx.ExecContext(bg, "ROLLBACK TO "+name)
			_, _ = t.tx.ExecContext(bg, "RELEASE "+name)
		}
	}()
	if err := fn(ctx); err != nil {
		return err
	}
	if _, err := t.tx.ExecContext(ctx, "RELEASE "+name); err != nil {
		return wrap(err)
	}
	ok = true
	return nil
}
