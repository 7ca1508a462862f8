package etcd

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/switchboard-mesh/switchboard/controlplane/store"
	"github.com/switchboard-mesh/switchboard/controlplane/store/memory"
)

// tx is a transaction in progress: the cache's own transaction does the work (and
// the undo when it fails); tx remembers which keys it touched so that the commit
// can write their final values to etcd.
type tx struct {
	mem     *memory.Store
	touched map[string]struct{}
	// implicit: made for one call outside Atomically, which lets a clear become a
	// range delete (a Txn may not put a key inside a range it deletes, and listing
	// every record of a large store would exceed --max-txn-ops).
	implicit bool
	prefixes []string // ranges to delete, only when implicit
	lastID   int64    // highest route id created
}

func (t *tx) touch(key string) { t.touched[key] = struct{}{} }

// txKey finds this store's transaction in a context.
type txKey struct{ s *Store }

func (s *Store) txOf(ctx context.Context) *tx {
	t, _ := ctx.Value(txKey{s}).(*tx)
	return t
}

// reader returns the cache a read goes to: the transaction's, or the store's, re-read
// from etcd first when it is stale.
func (s *Store) reader(ctx context.Context) (*memory.Store, error) {
	if t := s.txOf(ctx); t != nil {
		return t.mem, nil
	}
	return s.current(ctx, false)
}

func (s *Store) current(ctx context.Context, write bool) (*memory.Store, error) {
	s.mu.Lock()
	closed, stale, c := s.closed, s.stale, s.cache
	refused := write && s.require && s.fence == nil
	s.mu.Unlock()
	switch {
	case closed:
		return nil, store.ErrClosed
	case refused:
		return nil, fmt.Errorf("%w: this replica is a standby and does not write", ErrNotLeader)
	case !stale:
		return c, nil
	}
	if err := s.reload(ctx); err != nil {
		return nil, fmt.Errorf("etcd store: re-read: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cache, nil
}

// Atomically implements store.Store.
func (s *Store) Atomically(ctx context.Context, fn func(ctx context.Context) error) error {
	if t := s.txOf(ctx); t != nil {
		return t.mem.Atomically(ctx, fn)
	}
	return s.atomically(ctx, false, fn)
}

func (s *Store) atomically(ctx context.Context, implicit bool, fn func(ctx context.Context) error) error {
	mem, err := s.current(ctx, true)
	if err != nil {
		return err
	}
	t := &tx{mem: mem, touched: map[string]struct{}{}, implicit: implicit}
	return mem.Atomically(context.WithValue(ctx, txKey{s}, t), func(ctx context.Context) error {
		if err := fn(ctx); err != nil {
			return err
		}
		// The cache's write lock is still held: the commit lands in etcd before any
		// other write can see the cache.
		return s.commit(ctx, t)
	})
}

// write runs fn in the context's transaction, or in a transaction of its own.
func (s *Store) write(ctx context.Context, fn func(ctx context.Context, t *tx) error) error {
	if t := s.txOf(ctx); t != nil {
		return fn(ctx, t)
	}
	return s.atomically(ctx, true, func(ctx context.Context) error { return fn(ctx, s.txOf(ctx)) })
}

// commit writes every touched key's final value to etcd in one Txn that holds only
// if none of them changed since the cache read it and, for a leader, the election
// key is still its own.
func (s *Store) commit(ctx context.Context, t *tx) error {
	s.mu.Lock()
	f, seq := s.fence, s.routeSeq
	s.mu.Unlock()
	if t.lastID > seq {
		t.touch(routeSeqKey)
	}
	if len(t.touched) == 0 && len(t.prefixes) == 0 {
		return nil
	}
	var cmps []clientv3.Cmp
	if f != nil {
		// A leader's write does not outlive its term: when the term ends (the
		// elector's deadline passed, or Follow), the Txn is abandoned and the cache's
		// lock released. Should the abandoned Txn still reach etcd, late, the compare
		// below refuses it once the election key is gone.
		var stop context.CancelFunc
		ctx, stop = context.WithCancel(ctx)
		defer stop()
		defer context.AfterFunc(f.term, stop)()
		if f.term.Err() != nil {
			return fmt.Errorf("%w: the term this write was fenced on has ended", ErrNotLeader)
		}
		cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(f.key), "=", f.rev))
	} else if s.require {
		return fmt.Errorf("%w: this replica is a standby and does not write", ErrNotLeader)
	}
	keys := make([]string, 0, len(t.touched))
	for k := range t.touched {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	ops := make([]clientv3.Op, 0, len(keys)+len(t.prefixes))
	puts := make([]bool, len(keys))
	for i, k := range keys {
		val, present, err := s.valueOf(ctx, t, k, max(seq, t.lastID))
		if err != nil {
			return err
		}
		s.mu.Lock()
		rev := s.modRev[k]
		s.mu.Unlock()
		cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(s.prefix+k), "=", rev))
		if puts[i] = present; present {
			ops = append(ops, clientv3.OpPut(s.prefix+k, val))
		} else {
			ops = append(ops, clientv3.OpDelete(s.prefix+k))
		}
	}
	for _, p := range t.prefixes {
		ops = append(ops, clientv3.OpDelete(s.prefix+p, clientv3.WithPrefix()))
	}
	if f != nil {
		// The term stamped on every write: etcd's history of this key shows which
		// leader wrote what, and that no write of an older term follows a newer one.
		ops = append(ops, clientv3.OpPut(s.prefix+TermKey, strconv.FormatInt(f.rev, 10)))
	}
	resp, err := s.client.Txn(ctx).If(cmps...).Then(ops...).Commit()
	if err != nil {
		// The outcome is unknown: the Txn may have been applied. Re-read before the
		// next write.
		s.markStale()
		if f != nil && f.term.Err() != nil {
			return fmt.Errorf("%w: the term ended with this write in flight (%d keys; fenced on the term should it still arrive): %w", ErrNotLeader, len(ops), err)
		}
		return fmt.Errorf("etcd store: commit %d keys: %w", len(ops), err)
	}
	if !resp.Succeeded {
		return s.refused(ctx, f)
	}
	s.committed(keys, puts, t, resp.Header.Revision)
	return nil
}

func (s *Store) markStale() {
	s.mu.Lock()
	s.stale = true
	s.mu.Unlock()
}

// committed records the revision the written keys now have.
func (s *Store) committed(keys []string, puts []bool, t *tx, rev int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range t.prefixes {
		for k := range s.modRev {
			if strings.HasPrefix(k, p) {
				delete(s.modRev, k)
			}
		}
	}
	for i, k := range keys {
		if puts[i] {
			s.modRev[k] = rev
		} else {
			delete(s.modRev, k)
		}
	}
	s.routeSeq = max(s.routeSeq, t.lastID)
}

// refused tells a fenced write (ErrNotLeader) from a record another writer changed
// (store.ErrConflict); either way the cache is re-read before the next write.
func (s *Store) refused(ctx context.Context, f *fence) error {
	s.markStale()
	if f != nil {
		resp, err := s.client.Get(ctx, f.key)
		if err != nil {
			return fmt.Errorf("etcd store: write refused, and the election key could not be read: %w", err)
		}
		if len(resp.Kvs) == 0 || resp.Kvs[0].CreateRevision != f.rev {
			return fmt.Errorf("%w: leadership lost (election key %s is no longer this replica's); the write was fenced", ErrNotLeader, f.key)
		}
	}
	return fmt.Errorf("%w: another writer changed the records in etcd", store.ErrConflict)
}

// valueOf returns what the transaction leaves under key, or present false when it
// leaves nothing there.
func (s *Store) valueOf(ctx context.Context, t *tx, key string, seq int64) (string, bool, error) {
	dir, id, _ := strings.Cut(key, "/")
	var rec any
	var err error
	switch dir + "/" {
	case nodesDir:
		rec, err = t.mem.GetNode(ctx, id)
	case linksDir:
		rec, err = t.mem.GetLink(ctx, id)
	case routesDir:
		n, perr := strconv.ParseInt(id, 10, 64)
		if perr != nil {
			return "", false, fmt.Errorf("etcd store: bad route key %s: %w", key, perr)
		}
		rec, err = t.mem.GetRoute(ctx, n)
	case segmentsDir:
		rec, err = segment(ctx, t.mem, id)
	case secretsDir:
		secrets, lerr := t.mem.ListGroupSecrets(ctx)
		secret, ok := secrets[id]
		if lerr != nil || !ok {
			return "", false, lerr
		}
		return secret, true, nil
	default:
		return strconv.FormatInt(seq, 10), true, nil // routeSeqKey
	}
	if errors.Is(err, store.ErrNotFound) {
		return "", false, nil
	}
	if err != nil {
		return "", false, err
	}
	b, err := marshal(rec)
	return b, err == nil, err
}

func segment(ctx context.Context, m *memory.Store, name string) (store.Segment, error) {
	segs, err := m.ListSegments(ctx)
	if err != nil {
		return store.Segment{}, err
	}
	for _, seg := range segs {
		if seg.Name == name {
			return seg, nil
		}
	}
	return store.Segment{}, store.NotFound("segment", name)
}
