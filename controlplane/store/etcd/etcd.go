package etcd

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/switchboard-mesh/switchboard/controlplane/store"
	"github.com/switchboard-mesh/switchboard/controlplane/store/memory"
)

// ErrNotLeader: a write by a replica that does not hold the leadership — it never
// had it, or lost it (its election key is gone or belongs to another replica).
// Nothing was written.
var ErrNotLeader = errors.New("not the leader")

// DefaultDialTimeout bounds connecting when Options.DialTimeout is zero.
const DefaultDialTimeout = 5 * time.Second

// Options configure Open. Endpoints, or Client, is required.
type Options struct {
	// Endpoints are etcd's client URLs or host:port pairs.
	Endpoints []string
	// Prefix is where the records live; DefaultPrefix when empty.
	Prefix string
	// TLS, when set, is used for every connection.
	TLS *tls.Config
	// Username and Password authenticate to an etcd with auth enabled.
	Username, Password string
	// DialTimeout bounds connecting and the first read; DefaultDialTimeout when zero.
	DialTimeout time.Duration
	// Client, when set, is used instead of dialling (and is not closed by Close), so
	// that the store and the leader election share one connection.
	Client *clientv3.Client
	// RequireLeader refuses writes until Lead is called: what a replica that may be
	// a standby opens.
	RequireLeader bool
	Logger        *slog.Logger
}

// Store is the etcd control-plane store; see the package documentation.
type Store struct {
	client    *clientv3.Client
	ownClient bool
	prefix    string
	log       *slog.Logger
	require   bool

	mu     sync.Mutex
	closed bool
	cache  *memory.Store
	// modRev is each key's mod revision as the cache saw it last; commits compare it.
	modRev   map[string]int64
	routeSeq int64
	cacheRev int64 // the etcd revision the cache was read at
	fence    *fence
	// stale: etcd changed since cache was read (a standby's view), or a commit
	// failed on a compare (the leader's cache can no longer be trusted).
	stale bool

	stopWatch context.CancelFunc
	watching  sync.WaitGroup
}

// fence is the election key a leader's writes are conditional on.
type fence struct {
	key string
	rev int64
	// term ends with the leadership (Lead's context, or Follow): a commit still in
	// flight then is abandoned (commit), so that a leader cut off from etcd — whose
	// Txn may hang on a connection that delivers nothing — does not hold the cache's
	// lock, and with it every reconciler, past the end of its term.
	term context.Context
	end  context.CancelFunc
}

var _ store.Store = (*Store)(nil)

// Open connects to etcd, reads every record under the prefix and, for a store that
// may be a standby, watches the prefix to keep its view fresh.
func Open(ctx context.Context, o Options) (*Store, error) {
	prefix, err := normalisePrefix(o.Prefix)
	if err != nil {
		return nil, err
	}
	s := &Store{client: o.Client, prefix: prefix, log: o.Logger, require: o.RequireLeader}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.client == nil {
		if s.client, err = dial(o); err != nil {
			return nil, err
		}
		s.ownClient = true
	}
	timeout := o.DialTimeout
	if timeout <= 0 {
		timeout = DefaultDialTimeout
	}
	lctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := s.reload(lctx); err != nil {
		s.closeClient()
		// gRPC hides why (refused, a TLS handshake) behind the timeout: say what to check.
		if lctx.Err() != nil || status.Code(err) == codes.DeadlineExceeded || errors.Is(err, context.DeadlineExceeded) {
			return nil, fmt.Errorf("etcd store at %v: no answer within %s (check the endpoints, TLS and credentials): %w", o.Endpoints, timeout, err)
		}
		return nil, fmt.Errorf("etcd store at %v: %w", o.Endpoints, err)
	}
	wctx, stop := context.WithCancel(context.Background())
	s.stopWatch = stop
	if s.require { // only a standby needs telling that etcd changed
		s.watching.Go(func() { s.watch(wctx) })
	}
	return s, nil
}

func dial(o Options) (*clientv3.Client, error) {
	if len(o.Endpoints) == 0 {
		return nil, errors.New("etcd store: no endpoints given")
	}
	timeout := o.DialTimeout
	if timeout <= 0 {
		timeout = DefaultDialTimeout
	}
	if (o.Username == "") != (o.Password == "") {
		return nil, errors.New("etcd store: username and password go together: give both or neither")
	}
	c, err := clientv3.New(clientv3.Config{
		Endpoints: o.Endpoints, DialTimeout: timeout, TLS: o.TLS,
		Username: o.Username, Password: o.Password, Logger: zap.NewNop(),
	})
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return nil, fmt.Errorf("etcd store at %v: no answer within %s (check the endpoints, TLS and credentials): %w", o.Endpoints, timeout, err)
		}
		return nil, fmt.Errorf("etcd store at %v: %w", o.Endpoints, err)
	}
	return c, nil
}

// Client is the store's etcd client (for an election sharing the connection).
func (s *Store) Client() *clientv3.Client { return s.client }

// Prefix is the key prefix the records live under.
func (s *Store) Prefix() string { return s.prefix }

// reload replaces the cache with etcd's contents. The caller holds no lock on the
// cache; s.mu is taken for the swap.
func (s *Store) reload(ctx context.Context) error {
	// Cleared before the read: a change the watch reports while it runs marks the
	// view stale again instead of being lost.
	s.mu.Lock()
	s.stale = false
	s.mu.Unlock()
	resp, err := s.client.Get(ctx, s.prefix, clientv3.WithPrefix())
	if err != nil {
		s.markStale()
		return err
	}
	c := memory.Contents{Secrets: map[string]string{}}
	modRev := make(map[string]int64, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		key := strings.TrimPrefix(string(kv.Key), s.prefix)
		if err := decodeInto(&c, key, kv.Value); err != nil {
			return err
		}
		modRev[key] = kv.ModRevision
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if resp.Header.Revision < s.cacheRev {
		return nil // a concurrent reload read a later state
	}
	s.cache, s.modRev, s.routeSeq, s.cacheRev = memory.Restore(c), modRev, c.LastRouteID, resp.Header.Revision
	return nil
}

// watch marks a standby's view stale whenever something under the prefix changes,
// until ctx ends. A leader's own commits mark nothing: its cache is current.
func (s *Store) watch(ctx context.Context) {
	for ctx.Err() == nil {
		s.mu.Lock()
		from := s.cacheRev + 1 // nothing after the view's read is missed
		s.mu.Unlock()
		for resp := range s.client.Watch(clientv3.WithRequireLeader(ctx), s.prefix, clientv3.WithPrefix(), clientv3.WithRev(from)) {
			s.mu.Lock()
			if s.fence == nil {
				s.stale = true
			}
			s.mu.Unlock()
			if resp.Err() != nil {
				break
			}
		}
		select { // the watch ended (etcd unreachable, compaction): open another
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
			s.mu.Lock()
			s.stale = s.stale || s.fence == nil
			s.mu.Unlock()
		}
	}
}

// Lead makes this store the leader's: it re-reads etcd (the cache may be a
// standby's, or older than the previous leader's last writes) and from then on makes
// every write conditional on the election key still existing with createRev. The
// leadership lasts until ctx ends (the term's context) or Follow: a write in flight
// then fails with ErrNotLeader rather than wait for etcd.
func (s *Store) Lead(ctx context.Context, key string, createRev int64) error {
	if err := s.reload(ctx); err != nil {
		return fmt.Errorf("etcd store: load on taking the lead: %w", err)
	}
	term, end := context.WithCancel(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fence != nil {
		s.fence.end()
	}
	s.fence = &fence{key: key, rev: createRev, term: term, end: end}
	return nil
}

// Follow drops the leadership: writes are refused again, those in flight are
// abandoned, and reads re-read etcd.
func (s *Store) Follow() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fence != nil {
		s.fence.end()
	}
	s.fence, s.stale = nil, true
}

// Close implements store.Store.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	s.stopWatch()
	s.watching.Wait()
	s.closeClient()
	return nil
}

func (s *Store) closeClient() {
	if s.ownClient {
		_ = s.client.Close()
	}
}
