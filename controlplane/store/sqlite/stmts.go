package sqlite

import (
	"context"
	"database/sql"
	"strings"
	"sync"
)

// Statements are prepared once and reused: SQLite compiles every statement it is
// handed, and a planning step that writes ten thousand routes, or a reconciler pass
// that reads a node's routes and links, would otherwise compile the same few
// statements over and over. database/sql keeps a prepared statement per pooled
// connection and re-prepares on a connection that has not seen it; a transaction gets
// its own copy (Tx.StmtContext), reused for the rest of the transaction.

type stmtCache struct {
	mu    sync.Mutex
	stmts map[string]*sql.Stmt
}

// cacheable: a script of several statements (the migrations) cannot be prepared as
// one.
func cacheable(q string) bool { return !strings.Contains(q, ";") }

func (c *stmtCache) get(ctx context.Context, db *sql.DB, q string) (*sql.Stmt, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if st, ok := c.stmts[q]; ok {
		return st, nil
	}
	st, err := db.PrepareContext(ctx, q)
	if err != nil {
		return nil, err
	}
	if c.stmts == nil {
		c.stmts = map[string]*sql.Stmt{}
	}
	c.stmts[q] = st
	return st, nil
}

func (c *stmtCache) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, st := range c.stmts {
		_ = st.Close()
	}
	c.stmts = nil
}

// dbQuerier runs statements outside a transaction, prepared.
type dbQuerier struct{ s *Store }

func (d dbQuerier) ExecContext(ctx context.Context, q string, args ...any) (sql.Result, error) {
	if cacheable(q) {
		if st, err := d.s.stmts.get(ctx, d.s.db, q); err == nil {
			return st.ExecContext(ctx, args...)
		}
	}
	return d.s.db.ExecContext(ctx, q, args...)
}

func (d dbQuerier) QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	if cacheable(q) {
		if st, err := d.s.stmts.get(ctx, d.s.db, q); err == nil {
			return st.QueryContext(ctx, args...)
		}
	}
	return d.s.db.QueryContext(ctx, q, args...)
}

// QueryRowContext falls back to the unprepared query when preparing fails, so that
// the error reaches the caller through the row as usual.
func (d dbQuerier) QueryRowContext(ctx context.Context, q string, args ...any) *sql.Row {
	if cacheable(q) {
		if st, err := d.s.stmts.get(ctx, d.s.db, q); err == nil {
			return st.QueryRowContext(ctx, args...)
		}
	}
	return d.s.db.QueryRowContext(ctx, q, args...)
}

// writeQuerier runs a write outside a transaction, under the store's write lock.
type writeQuerier struct{ dbQuerier }

func (w writeQuerier) ExecContext(ctx context.Context, q string, args ...any) (sql.Result, error) {
	if err := w.s.lockWrites(ctx); err != nil {
		return nil, err
	}
	defer w.s.unlockWrites()
	return w.dbQuerier.ExecContext(ctx, q, args...)
}

// txQuerier runs statements in one transaction, each prepared once for it.
type txQuerier struct {
	s     *Store
	tx    *sql.Tx
	stmts map[string]*sql.Stmt
}

func newTxQuerier(s *Store, tx *sql.Tx) *txQuerier {
	return &txQuerier{s: s, tx: tx, stmts: map[string]*sql.Stmt{}}
}

func (t *txQuerier) stmt(ctx context.Context, q string) *sql.Stmt {
	if !cacheable(q) {
		return nil
	}
	if st, ok := t.stmts[q]; ok {
		return st
	}
	shared, err := t.s.stmts.get(ctx, t.s.db, q)
	if err != nil {
		return nil
	}
	st := t.tx.StmtContext(ctx, shared)
	t.stmts[q] = st
	return st
}

func (t *txQuerier) ExecContext(ctx context.Context, q string, args ...any) (sql.Result, error) {
	if st := t.stmt(ctx, q); st != nil {
		return st.ExecContext(ctx, args...)
	}
	return t.tx.ExecContext(ctx, q, args...)
}

func (t *txQuerier) QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	if st := t.stmt(ctx, q); st != nil {
		return st.QueryContext(ctx, args...)
	}
	return t.tx.QueryContext(ctx, q, args...)
}

func (t *txQuerier) QueryRowContext(ctx context.Context, q string, args ...any) *sql.Row {
	if st := t.stmt(ctx, q); st != nil {
		return st.QueryRowContext(ctx, args...)
	}
	return t.tx.QueryRowContext(ctx, q, args...)
}
