package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"modernc.org/sqlite" // registers the "sqlite" driver
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/switchboard-mesh/switchboard/controlplane/store"
)

// Store is a store.Store on one SQLite database file.
type Store struct {
	db    *sql.DB
	stmts stmtCache
	// writes admits one writer at a time, in this process. SQLite admits one anyway;
	// a writer it turns away sleeps in its busy handler (for up to tens of
	// milliseconds at a time) and tries again, so under many small writes — the
	// reconcilers' and the core's — most of the time went to those sleeps. Waiting
	// here wakes the next writer the moment the last one commits.
	writes chan struct{}
	closed atomic.Bool
	now    func() time.Time
}

var _ store.Store = (*Store)(nil)

// pragmas run on every pooled connection. Write transactions take the write lock when
// they begin (_txlock=immediate), so two read-then-write transactions never deadlock;
// busy_timeout makes a writer wait for another instead of failing at once.
const pragmas = "_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=foreign_keys(1)" +
	"&_pragma=synchronous(NORMAL)&_txlock=immediate"

// Open opens (creating if needed) the database at path and brings its schema up to
// date. A database written by a newer version of this package is refused.
func Open(ctx context.Context, path string) (*Store, error) {
	if path == "" || strings.ContainsAny(path, "?#") || strings.HasPrefix(path, ":memory:") {
		return nil, fmt.Errorf("sqlite store: path %q must name a file and contain no '?' or '#'", path)
	}
	db, err := sql.Open("sqlite", path+"?"+pragmas)
	if err != nil {
		return nil, fmt.Errorf("sqlite store: open %s: %w", path, err)
	}
	// Every pooled connection runs the pragmas when it opens; keep the connections
	// the reconcilers and the core use at once instead of reopening them (and
	// re-preparing their statements) — the default keeps two.
	db.SetMaxIdleConns(16)
	s := &Store{db: db, now: time.Now, writes: make(chan struct{}, 1)}
	if err := s.migrate(ctx); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("sqlite store: %s: %w", path, err)
	}
	return s, nil
}

// JournalMode reports SQLite's journal mode ("wal" once opened).
func (s *Store) JournalMode(ctx context.Context) (string, error) {
	var mode string
	err := s.db.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode)
	return mode, err
}

// SchemaVersion reports the applied schema version.
func (s *Store) SchemaVersion(ctx context.Context) (int, error) {
	var v int
	err := s.db.QueryRowContext(ctx, "SELECT COALESCE(MAX(version), 0) FROM schema_migrations").Scan(&v)
	return v, err
}

// Close implements store.Store.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	s.stmts.close()
	return s.db.Close()
}

func (s *Store) check(ctx context.Context) error {
	if s.closed.Load() {
		return store.ErrClosed
	}
	if t := s.txOf(ctx); t != nil && t.done.Load() {
		return store.ErrTxDone
	}
	return ctx.Err()
}

// ClearRuntime implements store.Store.
func (s *Store) ClearRuntime(ctx context.Context) error {
	return s.Atomically(ctx, func(ctx context.Context) error {
		q, err := s.w(ctx)
		if err != nil {
			return err
		}
		return execAll(ctx, q, "DELETE FROM routes", "DELETE FROM links", "DELETE FROM nodes")
	})
}

// ClearAll implements store.Store.
func (s *Store) ClearAll(ctx context.Context) error {
	return s.Atomically(ctx, func(ctx context.Context) error {
		q, err := s.w(ctx)
		if err != nil {
			return err
		}
		return execAll(ctx, q, "DELETE FROM routes", "DELETE FROM links", "DELETE FROM nodes",
			"DELETE FROM segment_links", "DELETE FROM segments", "DELETE FROM group_secrets")
	})
}

func execAll(ctx context.Context, q querier, stmts ...string) error {
	for _, stmt := range stmts {
		if _, err := q.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("%s: %w", stmt, err)
		}
	}
	return nil
}

// inTx runs fn in a write transaction and commits it when fn succeeds. Inside a
// transaction of Atomically, fn runs on it directly: every inTx caller reads, checks
// and then makes a single write, so a failure leaves nothing to undo.
func (s *Store) inTx(ctx context.Context, fn func(querier) error) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	if t := s.txOf(ctx); t != nil {
		if err := t.begin(s); err != nil {
			return err
		}
		return fn(t.q)
	}
	if err := s.lockWrites(ctx); err != nil {
		return err
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		s.unlockWrites()
		return fmt.Errorf("sqlite store: begin: %w", err)
	}
	defer s.unlockWrites()
	if err := fn(newTxQuerier(s, tx)); err != nil {
		_ = tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("sqlite store: commit: %w", err)
	}
	return nil
}

// exec runs one write statement and maps "no row changed" to notFound.
func (s *Store) exec(ctx context.Context, notFound error, q string, args ...any) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	w, err := s.w(ctx)
	if err != nil {
		return err
	}
	res, err := w.ExecContext(ctx, q, args...)
	if err != nil {
		return fmt.Errorf("sqlite store: %w", err)
	}
	if n, err := res.RowsAffected(); err == nil && n == 0 && notFound != nil {
		return notFound
	}
	return nil
}

// busyTimeout bounds the wait for the write lock, as busy_timeout does SQLite's.
const busyTimeout = 10 * time.Second

// lockWrites waits for the write lock, for ctx to end or for busyTimeout.
func (s *Store) lockWrites(ctx context.Context) error {
	select {
	case s.writes <- struct{}{}:
		return nil
	default:
	}
	t := time.NewTimer(busyTimeout)
	defer t.Stop()
	select {
	case s.writes <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return fmt.Errorf("sqlite store: no write lock after %s: %w", busyTimeout, errWriteLockBusy)
	}
}

var errWriteLockBusy = errors.New("database is locked")

func (s *Store) unlockWrites() { <-s.writes }

func isUniqueViolation(err error) bool {
	var se *sqlite.Error
	if !errors.As(err, &se) {
		return false
	}
	return se.Code() == sqlite3.SQLITE_CONSTRAINT_UNIQUE || se.Code() == sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY
}

func isNoRows(err error) bool { return errors.Is(err, sql.ErrNoRows) }

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
