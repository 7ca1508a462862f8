// Package backoff spaces retries: exponential growth with full jitter (each wait is
// uniform below a ceiling that doubles from Min to Max), so that many agents, watchers
// or replicas retrying one backend spread out instead of retrying in step.
package backoff

import (
	"context"
	"math/rand/v2"
	"time"
)

// Backoff hands out the waits of one retry loop. The zero value is not useful: set Min
// and Max. It is not safe for concurrent use; each loop owns one.
type Backoff struct {
	Min, Max time.Duration
	ceiling  time.Duration
}

// Next returns the wait before the next retry and raises the ceiling for the one after.
// The wait is at least a millisecond, so a retry loop never spins.
func (b *Backoff) Next() time.Duration {
	if b.ceiling == 0 {
		b.ceiling = max(b.Min, time.Millisecond)
	}
	wait := time.Duration(rand.Int64N(int64(b.ceiling))) + time.Millisecond
	b.ceiling = min(2*b.ceiling, max(b.Max, b.Min))
	return wait
}

// Reset starts the next wait from Min again: call it after a success.
func (b *Backoff) Reset() { b.ceiling = 0 }

// Wait sleeps for Next and reports whether ctx is still live.
func (b *Backoff) Wait(ctx context.Context) bool { return Sleep(ctx, b.Next()) }

// Sleep waits d, or less if ctx ends first; it reports whether ctx is still live.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
