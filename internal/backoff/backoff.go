// Package backoff spaces retries: exponential growth with full jitter (each wait is
// uniform below a ceiling that doubles from Min to Max), so that many agents, watchers
// or replicas retrying one backend spread out instead of retrying in step. It is the
// one retry schedule of the repository: loops that count their own failures (an agent
// entry, a data-plane session) ask Delay for the n-th wait, loops that do not keep a
// Backoff and call Next.
package backoff

import (
	"context"
	"math/rand/v2"
	"time"
)

// Backoff hands out the waits of one retry loop. Set Min and Max; the zero value of
// the rest is ready to use. Next and Reset are not safe for concurrent use: each loop
// owns its Backoff.
type Backoff struct {
	Min, Max time.Duration
	// Rand returns a uniform number in [0, n); nil means math/rand/v2. Tests set it to
	// pin the waits.
	Rand    func(n int64) int64
	attempt int
}

// Ceiling is the most the wait before retry n (counted from 0) can be: Min doubled n
// times, at most Max, and at least a millisecond.
func (b Backoff) Ceiling(n int) time.Duration {
	c := max(b.Min, time.Millisecond)
	limit := max(b.Max, c)
	for i := 0; i < n && c < limit; i++ {
		if c > limit/2 {
			return limit // doubling would pass the cap (or overflow)
		}
		c *= 2
	}
	return c
}

// Delay is the wait before retry n: uniform in [0, Ceiling(n)] (full jitter), and at
// least a millisecond, so a retry loop never spins.
func (b Backoff) Delay(n int) time.Duration {
	rnd := b.Rand
	if rnd == nil {
		rnd = rand.Int64N
	}
	return max(time.Duration(rnd(int64(b.Ceiling(n))+1)), time.Millisecond)
}

// Next returns the wait before the next retry and counts the retry.
func (b *Backoff) Next() time.Duration {
	d := b.Delay(b.attempt)
	b.attempt++
	return d
}

// Attempt is how many waits Next has handed out since the last Reset.
func (b *Backoff) Attempt() int { return b.attempt }

// Reset starts the next wait from Min again: call it after a success.
func (b *Backoff) Reset() { b.attempt = 0 }

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
