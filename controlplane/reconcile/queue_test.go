package reconcile

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// counter records the syncs of each key.
type counter struct {
	mu    sync.Mutex
	calls map[string]int
	seen  chan string
}

func newCounter() *counter { return &counter{calls: map[string]int{}, seen: make(chan string, 1000)} }

func (c *counter) record(key string) int {
	c.mu.Lock()
	c.calls[key]++
	n := c.calls[key]
	c.mu.Unlock()
	c.seen <- key
	return n
}

func (c *counter) count(key string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls[key]
}

func runQueue(t *testing.T, cfg QueueConfig, sync func(context.Context, string) error) (*Queue, func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	q := NewQueue(cfg, sync)
	done := make(chan struct{})
	go func() { q.Run(ctx); close(done) }()
	return q, func() { cancel(); <-done }
}

func waitCount(t *testing.T, c *counter, key string, n int) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for c.count(key) < n {
		select {
		case <-c.seen:
		case <-deadline:
			t.Fatalf("%s synced %d times, want %d", key, c.count(key), n)
		}
	}
}

func TestFailedKeyDroppedAfterMaxRequeues(t *testing.T) {
	c := newCounter()
	q, stop := runQueue(t, QueueConfig{BaseDelay: time.Millisecond, MaxDelay: 2 * time.Millisecond, MaxRequeues: 3}, func(_ context.Context, k string) error {
		c.record(k)
		return errors.New("node refused")
	})
	defer stop()
	q.Add("g/a")
	waitCount(t, c, "g/a", 4) // the first try and three retries
	time.Sleep(100 * time.Millisecond)
	if n := c.count("g/a"); n != 4 {
		t.Fatalf("synced %d times, want 4: dropped after max_requeues", n)
	}
	// A later sweep brings it back with a fresh retry budget.
	q.Add("g/a")
	waitCount(t, c, "g/a", 8)
}

func TestRetrySoonDoesNotConsumeRetries(t *testing.T) {
	c := newCounter()
	q, stop := runQueue(t, QueueConfig{BaseDelay: time.Millisecond, MaxDelay: 2 * time.Millisecond, MaxRequeues: 2}, func(_ context.Context, k string) error {
		if n := c.record(k); n <= 5 {
			return ErrRetrySoon // more races than max_requeues allows
		}
		return nil
	})
	defer stop()
	q.Add("g/a")
	waitCount(t, c, "g/a", 6)
}

func TestSuccessForgetsFailures(t *testing.T) {
	var fail atomic.Bool
	fail.Store(true)
	c := newCounter()
	q, stop := runQueue(t, QueueConfig{BaseDelay: time.Millisecond, MaxDelay: 2 * time.Millisecond, MaxRequeues: 2}, func(_ context.Context, k string) error {
		n := c.record(k)
		if n == 2 {
			return nil // the first retry succeeds and resets the count
		}
		if n < 5 {
			return errors.New("flaky")
		}
		return nil
	})
	defer stop()
	q.Add("g/a")
	waitCount(t, c, "g/a", 2)
	q.Add("g/a")
	// With the budget reset, two more failures are retried: syncs 3, 4 fail, 5 succeeds.
	waitCount(t, c, "g/a", 5)
}

func TestKeysDeduplicatedAndNotConcurrent(t *testing.T) {
	var inFlight, maxInFlight atomic.Int32
	release := make(chan struct{})
	c := newCounter()
	q, stop := runQueue(t, QueueConfig{Workers: 4}, func(_ context.Context, k string) error {
		n := inFlight.Add(1)
		defer inFlight.Add(-1)
		for {
			m := maxInFlight.Load()
			if n <= m || maxInFlight.CompareAndSwap(m, n) {
				break
			}
		}
		c.record(k)
		<-release
		return nil
	})
	defer stop()
	q.Add("g/a")
	<-c.seen // the first sync is running
	for range 10 {
		q.Add("g/a") // queued while running: coalesced into one more sync
	}
	close(release)
	waitCount(t, c, "g/a", 2)
	time.Sleep(50 * time.Millisecond)
	if n := c.count("g/a"); n != 2 {
		t.Fatalf("synced %d times, want 2", n)
	}
	if maxInFlight.Load() != 1 {
		t.Fatalf("one key synced by %d workers at once", maxInFlight.Load())
	}
}

func TestSweepQueuesAllKeys(t *testing.T) {
	c := newCounter()
	q, stop := runQueue(t, QueueConfig{}, func(_ context.Context, k string) error { c.record(k); return nil })
	defer stop()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		Sweep(ctx, 10*time.Millisecond, func() []string { return []string{"g/a", "g/b"} }, q)
		close(done)
	}()
	waitCount(t, c, "g/a", 2)
	waitCount(t, c, "g/b", 2)
	cancel()
	<-done
	Sweep(context.Background(), 0, nil, q) // disabled: returns at once
}
