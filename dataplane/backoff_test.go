package dataplane

import (
	"testing"
	"time"
)

// The schedule itself (full jitter under a doubling, capped ceiling) is
// internal/backoff's and tested there; this is the data plane's use of it.
func TestRetrierBacksOffFromBaseToMax(t *testing.T) {
	r := retrier{b: Backoff{Base: 100 * time.Millisecond, Max: 3 * time.Second, HealthyAfter: time.Minute},
		rnd: func(n int64) int64 { return n - 1 }}
	for i, w := range []time.Duration{100, 200, 400, 800, 1600, 3000, 3000} {
		if got := r.next(false, 0); got != w*time.Millisecond {
			t.Errorf("failure %d: %v, want the ceiling %v", i, got, w*time.Millisecond)
		}
	}
	low := retrier{b: r.b, rnd: func(int64) int64 { return 0 }}
	if got := low.next(false, 0); got != time.Millisecond {
		t.Errorf("lowest wait %v, want the 1ms floor (full jitter)", got)
	}
}

func TestRetrierResetsOnlyAfterHealthySession(t *testing.T) {
	r := retrier{b: Backoff{Base: time.Second, Max: time.Hour, HealthyAfter: 10 * time.Second},
		rnd: func(n int64) int64 { return n - 1 }}
	for i, w := range []time.Duration{1, 2, 4, 8} {
		if got := r.next(false, time.Hour); got != w*time.Second {
			t.Fatalf("failure %d: %v", i, got)
		}
	}
	// Registered but dropped at once: still backing off.
	if got := r.next(true, time.Second); got != 16*time.Second {
		t.Fatalf("short session: %v", got)
	}
	// A healthy session resets the count.
	if got := r.next(true, 10*time.Second); got != time.Second {
		t.Fatalf("after healthy session: %v", got)
	}
}
