package etcd

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/switchboard-mesh/switchboard/registry"
)

// Defaults for Options.
const (
	DefaultDialTimeout = 5 * time.Second
	DefaultMaxTxnOps   = 128
)

// Options configure New.
type Options struct {
	// Endpoints are the etcd client URLs or host:port pairs; required.
	Endpoints []string
	// Prefix is the key prefix; default DefaultPrefix. A missing trailing '/' is added.
	Prefix string
	// TLS, when set, is used for every connection.
	TLS *tls.Config
	// Username and Password authenticate to an etcd with auth enabled.
	Username, Password string
	// DialTimeout bounds connecting, and the check New makes that etcd answers;
	// default DefaultDialTimeout.
	DialTimeout time.Duration
	// MaxTxnOps is the most operations one Txn carries: the server's
	// --max-txn-ops; default DefaultMaxTxnOps.
	MaxTxnOps int
	// Logger receives warnings from the backend and the etcd client; default discard.
	Logger *slog.Logger
}

// Registry is the etcd backend. It is safe for concurrent use.
type Registry struct {
	client *clientv3.Client
	layout layout
	leases *leases
	log    *slog.Logger
	// maxOps starts at Options.MaxTxnOps and only shrinks, when the server turns
	// out to accept fewer operations (or bytes) per Txn.
	maxOps   atomic.Int64
	pageSize int // keys per range read

	// root ends when the registry closes, ending every call and watch in flight.
	root   context.Context
	cancel context.CancelFunc
	mu     sync.RWMutex
	closed bool
	wg     sync.WaitGroup // calls and watch goroutines in flight

	hooks hooks
}

// hooks let tests stand between the watch loop and etcd; nil fields do nothing.
type hooks struct {
	// beforeWatch runs before a watch opens from rev; drop ends that watch as a
	// broken connection would.
	beforeWatch func(rev int64, drop context.CancelFunc)
	// resynced runs after a watcher re-read its range at rev because its
	// revision was compacted.
	resynced func(rev int64)
	// page runs after each page of a range read at rev.
	page func(rev int64)
}

var (
	_ registry.Registry = (*Registry)(nil)
	_ registry.Watcher  = (*Registry)(nil)
)

// New connects to etcd and checks that it answers a read of the prefix within the
// dial timeout, so a wrong address, certificate or password is reported here rather
// than on first use.
func New(ctx context.Context, o Options) (*Registry, error) {
	o, l, err := o.withDefaults()
	if err != nil {
		return nil, err
	}
	client, err := clientv3.New(clientv3.Config{
		Endpoints:   o.Endpoints,
		DialTimeout: o.DialTimeout,
		TLS:         o.TLS,
		Username:    o.Username,
		Password:    o.Password,
		Logger:      zapLogger(o.Logger),
	})
	if err == nil {
		err = probe(ctx, client, l.prefix, o.DialTimeout)
		if err != nil {
			_ = client.Close()
		}
	}
	if err != nil {
		// gRPC hides why a connection failed (refused, TLS handshake, …) behind
		// the timeout, so say what to check.
		hint := ""
		if errors.Is(err, context.DeadlineExceeded) {
			hint = fmt.Sprintf(" (no answer within %s: check the endpoints and TLS settings)", o.DialTimeout)
		}
		return nil, fmt.Errorf("etcd at %v%s: %w", o.Endpoints, hint, classify(ctx, err))
	}
	r := &Registry{client: client, layout: l, leases: newLeases(client), log: o.Logger, pageSize: defaultPageSize}
	r.maxOps.Store(int64(o.MaxTxnOps))
	r.root, r.cancel = context.WithCancel(context.Background())
	return r, nil
}

func (o Options) withDefaults() (Options, layout, error) {
	if len(o.Endpoints) == 0 {
		return o, layout{}, errors.New("etcd: no endpoints given")
	}
	if o.DialTimeout == 0 {
		o.DialTimeout = DefaultDialTimeout
	}
	if o.DialTimeout < 0 {
		return o, layout{}, fmt.Errorf("etcd: dial timeout %s: must be positive", o.DialTimeout)
	}
	if o.MaxTxnOps == 0 {
		o.MaxTxnOps = DefaultMaxTxnOps
	}
	if o.MaxTxnOps < 0 {
		return o, layout{}, fmt.Errorf("etcd: max txn ops %d: must be positive", o.MaxTxnOps)
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	l, err := newLayout(o.Prefix)
	return o, l, err
}

// probe reads one key name under the prefix: it needs a reachable quorum, valid
// credentials and read permission on the prefix, which is what the registry needs.
func probe(ctx context.Context, c *clientv3.Client, prefix string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	_, err := c.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithLimit(1))
	return err
}

// Prefix returns the key prefix, ending in '/'.
func (r *Registry) Prefix() string { return r.layout.prefix }

// begin admits one call: it fails with ErrClosed after Close, and returns a context
// that also ends when the registry closes, and a func the call runs when done.
func (r *Registry) begin(ctx context.Context) (context.Context, func(), error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.closed {
		return nil, nil, registry.ErrClosed
	}
	r.wg.Add(1)
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(r.root, cancel)
	return ctx, func() {
		stop()
		cancel()
		r.wg.Done()
	}, nil
}

// closedErr turns an error caused by Close cancelling a call into ErrClosed.
func (r *Registry) closedErr(err error) error {
	if err != nil && r.root.Err() != nil {
		return registry.ErrClosed
	}
	return err
}

// Close ends every watch, waits for calls in flight and closes the client. Leases
// are left to expire, so entries outlive the process by their TTL. It is idempotent.
func (r *Registry) Close() error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	r.mu.Unlock()
	r.cancel()
	r.wg.Wait()
	if err := r.client.Close(); err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("close etcd client: %w", err)
	}
	return nil
}
