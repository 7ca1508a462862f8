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

// txState is a transaction in progress: a real SQLite write transaction (begun
// IMMEDIATE, see pragmas), with savepoints for the nested ones.
type txState struct {
	tx    *sql.Tx
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

// q returns where ctx's statements run.
func (s *Store) q(ctx context.Context) querier {
	if t := s.txOf(ctx); t != nil {
		return t.tx
	}
	return s.db
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
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("sqlite store: begin: %w", err)
	}
	t := &txState{tx: tx}
	committed := false
	defer func() {
		t.done.Store(true)
		if !committed {
			_ = tx.Rollback() // also on a panic in fn
		}
	}()
	if err := fn(context.WithValue(ctx, txKey{s}, t)); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("sqlite store: commit: %w", err)
	}
	committed = true
	return nil
}

// savepoint runs a nested transaction: on failure only its own writes are undone.
func (t *txState) savepoint(ctx context.Context, fn func(context.Context) error) error {
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
