package reconcile

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"k8s.io/client-go/util/workqueue"
)

// ErrRetrySoon wraps a failure that is not the node's fault — the spec's "connection
// not found" race between the pre-flight check and the send — so the key is retried
// after the base delay without consuming one of its max_requeues retries.
var ErrRetrySoon = errors.New("retry without counting")

// QueueConfig tunes a Queue (docs/controlplane.md, "How it converges": retries).
type QueueConfig struct {
	Name        string
	Workers     int           // parallel workers; default 4
	BaseDelay   time.Duration // first retry delay; default 200 ms, doubling per failure
	MaxDelay    time.Duration // cap; default 30 s
	MaxRequeues int           // failures before a key is dropped until the next sweep; default 15
	Logger      *slog.Logger
	// OnResult observes every sync: the key, how long it took and its error.
	OnResult func(key string, took time.Duration, err error)
}

func (c QueueConfig) withDefaults() QueueConfig {
	if c.Workers <= 0 {
		c.Workers = 4
	}
	if c.BaseDelay <= 0 {
		c.BaseDelay = 200 * time.Millisecond
	}
	if c.MaxDelay <= 0 {
		c.MaxDelay = 30 * time.Second
	}
	if c.MaxRequeues <= 0 {
		c.MaxRequeues = 15
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// Queue runs a sync function for node ids on a deduplicating, rate-limited work queue
// (k8s.io/client-go/util/workqueue): a node queued many times while waiting is synced
// once, and a node is never synced by two workers at the same time.
type Queue struct {
	cfg  QueueConfig
	q    workqueue.TypedRateLimitingInterface[string]
	sync func(ctx context.Context, key string) error
}

// NewQueue returns a queue that calls sync for each key; Run starts its workers.
func NewQueue(cfg QueueConfig, sync func(ctx context.Context, key string) error) *Queue {
	cfg = cfg.withDefaults()
	limiter := workqueue.NewTypedItemExponentialFailureRateLimiter[string](cfg.BaseDelay, cfg.MaxDelay)
	return &Queue{
		cfg:  cfg,
		q:    workqueue.NewTypedRateLimitingQueueWithConfig(limiter, workqueue.TypedRateLimitingQueueConfig[string]{Name: cfg.Name}),
		sync: sync,
	}
}

// Add queues keys for a sync.
func (q *Queue) Add(keys ...string) {
	for _, k := range keys {
		q.q.Add(k)
	}
}

// Len is the number of keys waiting (not counting those in a delay).
func (q *Queue) Len() int { return q.q.Len() }

// Run processes keys with the configured number of workers until ctx ends, then shuts
// the queue down, letting in-flight syncs finish.
func (q *Queue) Run(ctx context.Context) {
	var wg sync.WaitGroup
	for range q.cfg.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for q.processNext(ctx) {
			}
		}()
	}
	<-ctx.Done()
	q.q.ShutDown()
	wg.Wait()
}

func (q *Queue) processNext(ctx context.Context) bool {
	key, shutdown := q.q.Get()
	if shutdown {
		return false
	}
	defer q.q.Done(key)
	start := time.Now()
	err := q.sync(ctx, key)
	if q.cfg.OnResult != nil {
		q.cfg.OnResult(key, time.Since(start), err)
	}
	q.handle(ctx, key, err)
	return true
}

// handle decides what happens to a key after a sync, as the spec's retry rules say.
func (q *Queue) handle(ctx context.Context, key string, err error) {
	switch {
	case err == nil:
		q.q.Forget(key)
	case ctx.Err() != nil:
		// Shutting down: nothing to retry.
	case errors.Is(err, ErrRetrySoon):
		q.q.AddAfter(key, q.cfg.BaseDelay)
	case q.q.NumRequeues(key) < q.cfg.MaxRequeues:
		q.cfg.Logger.Debug("sync failed, retrying", "queue", q.cfg.Name, "node", key, "attempt", q.q.NumRequeues(key)+1, "err", err)
		q.q.AddRateLimited(key)
	default:
		// The periodic sweep queues every connected node again, so dropping here
		// only stops the hot retry loop.
		q.cfg.Logger.Warn("sync failed too often, dropped until the next sweep", "queue", q.cfg.Name, "node", key, "retries", q.cfg.MaxRequeues, "err", err)
		q.q.Forget(key)
	}
}

// Sweep queues every key that keys returns, every period, until ctx ends. A period of
// 0 disables it.
func Sweep(ctx context.Context, period time.Duration, keys func() []string, queues ...*Queue) {
	if period <= 0 {
		return
	}
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			ks := keys()
			for _, q := range queues {
				q.Add(ks...)
			}
		}
	}
}
