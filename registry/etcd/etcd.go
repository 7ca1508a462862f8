package etcd

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
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

// keepAliveTime and keepAliveTimeout bound how long a silent connection to a member
// lasts: a ping after 10 s without traffic, 5 s to answer it.
const (
	keepAliveTime    = 10 * time.Second
	keepAliveTimeout = 5 * time.Second
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

// driver is the etcd backend's driver, used through a registry.Front. It is safe for
// concurrent use.
type driver struct {
	client *clientv3.Client
	layout layout
	leases *leases
	holds  holds // hold.go
	log    *slog.Logger
	// maxOps starts at Options.MaxTxnOps and only shrinks, when the server turns
	// out to accept fewer operations (or bytes) per Txn.
	maxOps   atomic.Int64
	pageSize int // keys per range read

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
	_ registry.WatchDriver = (*driver)(nil)
	_ registry.Holder      = (*driver)(nil)
)

// New connects to etcd and checks that it answers a read of the prefix within the
// dial timeout, so a wrong address, certificate or password is reported here rather
// than on first use.
func New(ctx context.Context, o Options) (*registry.Front, error) {
	return registry.Wrap("etcd")(newDriver(ctx, o))
}

func newDriver(ctx context.Context, o Options) (*driver, error) {
	o, l, err := o.withDefaults()
	if err != nil {
		return nil, err
	}
	client, err := clientv3.New(clientv3.Config{
		Endpoints:   o.Endpoints,
		DialTimeout: o.DialTimeout,
		// A path to a member that goes silent (a partition; the member itself is
		// fine) is never noticed without keepalives: a watch on it goes deaf and
		// requests sent on it wait for their deadline, until the path heals. With
		// them the connection is closed within 15 s and the client moves to another
		// member. etcd admits pings every 5 s (--grpc-keepalive-min-time).
		DialKeepAliveTime:    keepAliveTime,
		DialKeepAliveTimeout: keepAliveTimeout,
		TLS:                  o.TLS,
		Username:             o.Username,
		Password:             o.Password,
		Logger:               zapLogger(o.Logger),
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
	r := &driver{client: client, layout: l, leases: newLeases(client), log: o.Logger, pageSize: defaultPageSize}
	r.maxOps.Store(int64(o.MaxTxnOps))
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
func (r *driver) Prefix() string { return r.layout.prefix }

// Close closes the client. Leases are left to expire, so entries outlive the process
// by their TTL.
func (r *driver) Close() error {
	if err := r.client.Close(); err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("close etcd client: %w", err)
	}
	return nil
}
