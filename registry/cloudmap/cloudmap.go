package cloudmap

import (
	"context"
	"errors"
	"log/slog"
	"sync"
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

// driver is the Cloud Map backend's driver, used through a registry.Front. It is safe
// for concurrent use.
type driver struct {
	client *servicediscovery.Client
	opts   Options
	log    *slog.Logger
	nsID   string
	sem    chan struct{}

	services serviceCache
	busy     busySet
	reap     reapQueue

	life   context.Context // the reaper's: cancelled by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

var _ registry.Driver = (*driver)(nil)

// New resolves (or creates) the namespace and starts the expired-instance reaper,
// which runs until Close.
func New(ctx context.Context, opts Options) (*registry.Front, error) {
	return registry.Wrap("cloudmap")(newDriver(ctx, opts))
}

func newDriver(ctx context.Context, opts Options) (*driver, error) {
	if opts.Client == nil {
		return nil, errors.New("cloudmap: Options.Client is required")
	}
	opts = opts.withDefaults()
	r := &driver{
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
func (r *driver) NamespaceID() string { return r.nsID }

// Close stops the reaper. The Front has ended and waited for every call before.
func (r *driver) Close() error {
	r.cancel()
	r.wg.Wait()
	return nil
}

// acquire takes one of the request slots that bound the load on Cloud Map.
func (r *driver) acquire(ctx context.Context) (func(), error) {
	select {
	case r.sem <- struct{}{}:
		return func() { <-r.sem }, nil
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
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
