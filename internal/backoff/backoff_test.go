package backoff

import (
	"context"
	"testing"
	"time"
)

func TestWaitsStayUnderADoublingCappedCeiling(t *testing.T) {
	b := Backoff{Min: 10 * time.Millisecond, Max: 80 * time.Millisecond}
	ceilings := []time.Duration{10, 20, 40, 80, 80, 80}
	for round := range 200 {
		b.Reset()
		for i, c := range ceilings {
			w := b.Next()
			if w < time.Millisecond || w > c*time.Millisecond+time.Millisecond {
				t.Fatalf("round %d wait %d = %s, want in [1ms, %dms]", round, i, w, c+1)
			}
		}
	}
	// Full jitter: over many draws the waits spread across the range rather than
	// sitting at the ceiling.
	var low, high bool
	for range 500 {
		b.Reset()
		w := b.Next()
		low = low || w < 4*time.Millisecond
		high = high || w > 7*time.Millisecond
	}
	if !low || !high {
		t.Fatalf("waits under a 10ms ceiling are not spread (low %v, high %v)", low, high)
	}
}

func TestSleepEndsWithTheContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if Sleep(ctx, time.Hour) {
		t.Fatal("Sleep on a cancelled context reported it live")
	}
	if !Sleep(context.Background(), time.Millisecond) {
		t.Fatal("Sleep on a live context reported it ended")
	}
	b := Backoff{Min: time.Hour, Max: time.Hour}
	if b.Wait(ctx) {
		t.Fatal("Wait on a cancelled context reported it live")
	}
}

func TestDelayIsFullJitterUnderTheCeiling(t *testing.T) {
	highest := Backoff{Min: 100 * time.Millisecond, Max: 3 * time.Second, Rand: func(n int64) int64 { return n - 1 }}
	lowest := highest
	lowest.Rand = func(int64) int64 { return 0 }
	want := []time.Duration{100, 200, 400, 800, 1600, 3000, 3000}
	for n, w := range want {
		if got := highest.Delay(n); got != w*time.Millisecond {
			t.Errorf("retry %d: highest wait %v, want the ceiling %v", n, got, w*time.Millisecond)
		}
		if got := lowest.Delay(n); got != time.Millisecond {
			t.Errorf("retry %d: lowest wait %v, want the 1ms floor", n, got)
		}
	}
	if got := highest.Delay(1 << 20); got != highest.Max {
		t.Errorf("retry 2^20: %v, want the cap %v", got, highest.Max)
	}
	huge := Backoff{Min: time.Second, Max: 1<<63 - 1, Rand: highest.Rand}
	if got := huge.Delay(200); got != huge.Max {
		t.Errorf("doubling past the int64 range: %v, want the cap", got)
	}
}

func TestNextCountsAndResetStartsOver(t *testing.T) {
	b := Backoff{Min: time.Second, Max: time.Hour, Rand: func(n int64) int64 { return n - 1 }}
	for i, w := range []time.Duration{1, 2, 4, 8} {
		if got := b.Next(); got != w*time.Second {
			t.Fatalf("wait %d = %v, want %v", i, got, w*time.Second)
		}
	}
	if b.Attempt() != 4 {
		t.Fatalf("Attempt = %d after 4 waits", b.Attempt())
	}
	b.Reset()
	if got := b.Next(); got != time.Second {
		t.Fatalf("after Reset: %v, want Min", got)
	}
}
