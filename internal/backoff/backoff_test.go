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
