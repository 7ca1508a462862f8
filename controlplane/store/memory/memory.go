package memory

import (
	"cmp"
	"context"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/switchboard-mesh/switchboard/controlplane/store"
)

// Store keeps everything in maps behind one lock and hands out copies.
type Store struct {
	mu       sync.RWMutex
	closed   bool
	nodes    *nodeTable
	links    *linkTable
	routes   *routeTable
	segments map[string]map[store.SegmentLink]struct{}
	secrets  map[string]string
	now      func() time.Time
}

var _ store.Store = (*Store)(nil)

// New returns an empty store.
func New() *Store {
	s := &Store{now: time.Now}
	s.reset(true)
	return s
}

func (s *Store) reset(all bool) {
	s.nodes, s.links = newNodeTable(), newLinkTable()
	// The route id sequence goes on across a reset: ids are never reused.
	next := int64(0)
	if s.routes != nil {
		next = s.routes.nextID
	}
	s.routes = newRouteTable()
	s.routes.nextID = next
	if all {
		s.segments = map[string]map[store.SegmentLink]struct{}{}
		s.secrets = map[string]string{}
	}
}

// lock takes the write lock, or fails when the store is closed. Within a transaction
// (ctx carries one) the lock is held from the transaction's first write to its end:
// lock returns the transaction, for the write to record its undo, and an unlock that
// leaves the lock to the transaction.
func (s *Store) lock(ctx context.Context) (*tx, func(), error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	if t := s.txOf(ctx); t != nil {
		if t.done.Load() {
			return nil, nil, store.ErrTxDone
		}
		if !t.locked {
			s.mu.Lock()
			if s.closed {
				s.mu.Unlock()
				return nil, nil, store.ErrClosed
			}
			t.locked = true
		}
		return t, func() {}, nil
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, nil, store.ErrClosed
	}
	return nil, s.mu.Unlock, nil
}

func (s *Store) rlock(ctx context.Context) (func(), error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if t := s.txOf(ctx); t != nil {
		if t.done.Load() {
			return nil, store.ErrTxDone
		}
		if t.locked {
			return func() {}, nil
		}
	}
	s.mu.RLock()
	if s.closed {
		s.mu.RUnlock()
		return nil, store.ErrClosed
	}
	return s.mu.RUnlock, nil
}

// ClearRuntime implements store.Store.
func (s *Store) ClearRuntime(ctx context.Context) error {
	t, unlock, err := s.lock(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	s.keepAll(t)
	s.reset(false)
	return nil
}

// ClearAll implements store.Store.
func (s *Store) ClearAll(ctx context.Context) error {
	t, unlock, err := s.lock(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	s.keepAll(t)
	s.reset(true)
	return nil
}

// Close implements store.Store.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	return nil
}

func sortedValues[K comparable, V any](m map[K]V, keep func(V) bool, key func(V) string) []V {
	out := make([]V, 0, len(m))
	for _, v := range m {
		if keep(v) {
			out = append(out, v)
		}
	}
	slices.SortFunc(out, func(a, b V) int { return cmp.Compare(key(a), key(b)) })
	return out
}

func itoa(id int64) string { return strconv.FormatInt(id, 10) }
