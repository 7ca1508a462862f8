package cloudmap

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/servicediscovery"

	"github.com/switchboard-mesh/switchboard/registry"
)

// Defaults for Options.
const (
	DefaultNamespace        = "switchboard"
	DefaultOperationTimeout = time.Minute
	DefaultPollInterval     = 20 * time.Millisecond
	DefaultMaxPollInterval  = time.Second
	DefaultConcurrency      = 16
)

// Options configure New.
type Options struct {
	// Client talks to Cloud Map; required.
	Client *servicediscovery.Client
	// Namespace is the namespace name, or its id (ns-…); default DefaultNamespace.
	Namespace string
	// CreateNamespace creates an HTTP namespace of that name when none exists.
	CreateNamespace bool
	// OperationTimeout bounds the wait for one asynchronous operation to finish.
	OperationTimeout time.Duration
	// PollInterval is the first wait before GetOperation; it doubles up to
	// MaxPollInterval.
	PollInterval    time.Duration
	MaxPollInterval time.Duration
	// Concurrency caps the Cloud Map requests in flight from this registry.
	Concurrency int
	Logger      *slog.Logger
	// Now is the clock used for TTL expiry; default time.Now.
	Now func() time.Time
}

func (o Options) withDefaults() Options {
	if o.Namespace == "" {
		o.Namespace = DefaultNamespace
	}
	if o.OperationTimeout <= 0 {
		o.OperationTimeout = DefaultOperationTimeout
	}
	if o.PollInterval <= 0 {
		o.PollInterval = DefaultPollInterval
	}
	if o.MaxPollInterval < o.PollInterval {
		o.MaxPollInterval = max(DefaultMaxPollInterval, o.PollInterval)
	}
	if o.Concurrency <= 0 {
		o.Concurrency = DefaultConcurrency
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return o
}

// Registry is the Cloud Map backend. It is safe for concurrent use.
type Registry struct {
	client *servicediscovery.Client
	opts   Options
	log    *slog.Logger
	nsID   string
	sem    chan struct{}

	services serviceCache
	busy     busySet
	reap     reapQueue

	life   context.Context // cancelled by Close, ending in-flight calls and the reaper
	cancel context.CancelFunc
	closed atomic.Bool
	wg     sync.WaitGroup
}

var _ registry.Registry = (*Registry)(nil)

// New resolves (or creates) the namespace and starts the expired-instance reaper,
// which runs until Close.
func New(ctx context.Context, opts Options) (*Registry, error) {
	if opts.Client == nil {
		return nil, errors.New("cloudmap: Options.Client is required")
	}
	opts = opts.withDefaults()
	r := &Registry{
		client:   opts.Client,
		opts:     opts,
		log:      opts.Logger,
		sem:      make(chan struct{}, opts.Concurrency),
		services: serviceCache{ids: map[string]string{}},
		busy:     busySet{ids: map[string]int{}},
		reap:     newReapQueue(),
	}
	r.life, r.cancel = context.WithCancel(context.Background())
	id, err := r.resolveNamespace(ctx, opts.Namespace, opts.CreateNamespace)
	if err != nil {
		r.cancel()
		return nil, err
	}
	r.nsID = id
	r.wg.Add(1)
	go r.reapLoop()
	return r, nil
}

// NamespaceID is the id of the namespace in use.
func (r *Registry) NamespaceID() string { return r.nsID }

// Close stops the reaper and aborts in-flight calls (they fail with ErrClosed). It is
// idempotent.
func (r *Registry) Close() error {
	if r.closed.Swap(true) {
		return nil
	}
	r.cancel()
	r.wg.Wait()
	return nil
}

// scope ties a call's context to the registry's life, so Close interrupts it with
// ErrClosed as the cause.
func (r *Registry) scope(ctx context.Context) (context.Context, func(), error) {
	if r.closed.Load() {
		return nil, nil, registry.ErrClosed
	}
	ctx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(r.life, func() { cancel(registry.ErrClosed) })
	return ctx, func() { stop(); cancel(nil) }, nil
}

// acquire takes one of the request slots that bound the load on Cloud Map.
func (r *Registry) acquire(ctx context.Context) (func(), error) {
	select {
	case r.sem <- struct{}{}:
		return func() { <-r.sem }, nil
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
}

// closedErr marks an error caused by Close as ErrClosed, so callers can tell it
// from a backend failure.
func closedErr(ctx context.Context, err error) error {
	if err != nil && errors.Is(context.Cause(ctx), registry.ErrClosed) && !errors.Is(err, registry.ErrClosed) {
		return fmt.Errorf("%w: %w", registry.ErrClosed, err)
	}
	return err
}

// busySet counts the instance ids this process is writing, so the reaper leaves
// them alone.
type busySet struct {
	mu  sync.Mutex
	ids map[string]int
}

func (b *busySet) add(ids []string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, id := range ids {
		b.ids[id]++
	}
}

func (b *busySet) remove(ids []string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, id := range ids {
		if b.ids[id]--; b.ids[id] <= 0 {
			delete(b.ids, id)
		}
	}
}

func (b *busySet) has(id string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.ids[id] > 0
}
