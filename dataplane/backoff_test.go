package dataplane

import (
	"testing"
	"time"
)

func TestBackoffFullJitterCapped(t *testing.T) {
	b := Backoff{Base: 100 * time.Millisecond, Max: 3 * time.Second, HealthyAfter: time.Minute}
	highest := func(n int64) int64 { return n - 1 }
	lowest := func(int64) int64 { return 0 }
	want := []time.Duration{100, 200, 400, 800, 1600, 3000, 3000}
	for i, w := range want {
		if got := b.delay(i, highest); got != w*time.Millisecond {
			t.Errorf("attempt %d: ceiling %v, want %v", i, got, w*time.Millisecond)
		}
		if got := b.delay(i, lowest); got != 0 {
			t.Errorf("attempt %d: floor %v, want 0 (full jitter)", i, got)
		}
	}
	if got := b.delay(1000, highest); got != b.Max {
		t.Errorf("huge attempt: %v, want cap %v", got, b.Max)
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
