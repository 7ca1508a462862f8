package kubesync

import (
	"context"
	"log/slog"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/util/workqueue"
)

// workers per direction. Keys are service names and the queue never hands one key
// to two workers at once, so a sync owns its service while it runs.
const workers = 2

// controller is the sample-controller loop around one sync function: keys wait in
// a rate-limited work queue, a sync that fails is requeued with backoff, one that
// succeeds is forgotten. The sync is idempotent: it reads the whole state of its
// key, so a key queued many times is synced once, with what is current then.
type controller struct {
	dir   string
	queue workqueue.TypedRateLimitingInterface[string]
	sync  func(ctx context.Context, key string) error
	// timeout bounds each sync, if set: a write that hangs is given up and retried
	// with backoff rather than holding a worker for ever.
	timeout time.Duration
	log     *slog.Logger
	m       *metrics
}

func newController(dir string, sync func(context.Context, string) error, timeout time.Duration, log *slog.Logger, m *metrics) *controller {
	return &controller{dir: dir, sync: sync, timeout: timeout, log: log, m: m}
}

// open makes the queue. It runs goroutines until shut down, so it is made when
// Run starts, not in New: a Syncer built and never run leaves nothing behind.
func (c *controller) open() {
	c.queue = workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.DefaultTypedControllerRateLimiter[string](),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "kubesync_" + c.dir},
	)
}

// enqueue asks for key to be synced.
func (c *controller) enqueue(key string) {
	if key != "" {
		c.queue.Add(key)
	}
}

// run processes keys until ctx ends, then shuts the queue down and waits for the
// syncs in progress.
func (c *controller) run(ctx context.Context) {
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for c.next(ctx) {
			}
		})
	}
	<-ctx.Done()
	c.queue.ShutDown()
	wg.Wait()
}

// next syncs one key; it reports false once the queue is shut down.
func (c *controller) next(ctx context.Context) bool {
	key, quit := c.queue.Get()
	if quit {
		return false
	}
	defer c.queue.Done(key)
	if err := c.syncOne(ctx, key); err != nil {
		switch {
		case ctx.Err() != nil:
			return true // stopping: the failure is the cancellation, not the key's
		case staleCache(err):
			c.log.Debug("cache behind the API server, will retry", "service", key, "err", err)
		default:
			c.m.syncErrors.WithLabelValues(c.dir).Inc()
			c.log.Warn("sync failed, will retry", "service", key, "retries", c.queue.NumRequeues(key), "err", err)
		}
		c.queue.AddRateLimited(key)
		return true
	}
	c.queue.Forget(key)
	c.m.syncs.WithLabelValues(c.dir).Inc()
	c.m.lastSync.WithLabelValues(c.dir).SetToCurrentTime()
	return true
}

// syncOne runs one sync, within the timeout if there is one.
func (c *controller) syncOne(ctx context.Context, key string) error {
	if c.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.timeout)
		defer cancel()
	}
	return c.sync(ctx, key)
}

// staleCache reports whether err is the API server refusing a write made from a
// cached object older than its own (a resourceVersion conflict): routine right
// after our own write, and fixed by the retry once the cache has caught up.
func staleCache(err error) bool { return apierrors.IsConflict(err) }

// note is one problem a sync found: a skipped series' reason, or reasonConflict
// with the kind of object; and what it is about.
type note struct {
	reason string
	kind   string
	detail string
}

// reasonConflict is a note's reason for an object of the same name that is not ours.
const reasonConflict = "conflict"

// notes remembers what was logged for each service (a skipped port, a name clash),
// so a resync that finds the same problem again neither logs nor counts it again.
// A service's notes are replaced on every sync of it, so a problem that goes away
// and comes back is reported again, and the memory stays bounded by what exists.
type notes struct {
	mu  sync.Mutex
	svc map[string]map[note]bool
}

// replace sets svc's current notes and returns those not noted before.
func (n *notes) replace(svc string, now []note) []note {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.svc == nil {
		n.svc = map[string]map[note]bool{}
	}
	before := n.svc[svc]
	var fresh []note
	set := make(map[note]bool, len(now))
	for _, s := range now {
		if !before[s] && !set[s] {
			fresh = append(fresh, s)
		}
		set[s] = true
	}
	if len(set) == 0 {
		delete(n.svc, svc)
	} else {
		n.svc[svc] = set
	}
	return fresh
}

// has reports whether svc has notes.
func (n *notes) has(svc string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.svc[svc]) > 0
}
