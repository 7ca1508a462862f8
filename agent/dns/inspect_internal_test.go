package dns

import (
	"math"
	"testing"
	"time"
)

// TestStatsRate: the rate spans the oldest sample within the window, samples closer
// than a second are not kept, and after a quiet spell the rate spans the newest
// sample, however old.
func TestStatsRate(t *testing.T) {
	var s stats
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	type result struct {
		PerSecond float64
		Over      time.Duration
	}
	rate := func(now time.Time, queries uint64) result {
		s.answered.Store(queries)
		n, perSecond, over := s.rate(now)
		if n != queries {
			t.Fatalf("count %d, want %d", n, queries)
		}
		return result{perSecond, over}
	}
	if st := rate(at(0), 0); st.Over != 0 {
		t.Fatalf("first look measured a rate: %+v", st)
	}
	if st := rate(at(500*time.Millisecond), 10); st.Over != 0 {
		t.Fatalf("half a second later: %+v, want no rate yet", st)
	}
	st := rate(at(2*time.Second), 40)
	if st.Over != 2*time.Second || st.PerSecond != 20 {
		t.Fatalf("after 2s and 40 queries: %+v, want 20/s over 2s", st)
	}
	for i := 3; i <= 40; i++ {
		rate(at(time.Duration(i)*time.Second), uint64(i*100))
	}
	// 40s in: the oldest sample within 30s is at 10s (1,000 queries).
	st = rate(at(40*time.Second), 4000)
	if st.Over != 30*time.Second || math.Abs(st.PerSecond-100) > 1e-9 {
		t.Fatalf("at 40s: %+v, want 100/s over 30s", st)
	}
	// Ten quiet minutes: the newest sample is old, but still a base.
	st = rate(at(640*time.Second), 4600)
	if st.Over != 600*time.Second || math.Abs(st.PerSecond-1) > 1e-9 {
		t.Fatalf("after a quiet spell: %+v, want 1/s over 10m", st)
	}
}
