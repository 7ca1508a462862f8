package check

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// TestRecordKeepsHistory: Record keeps the counters in a row, the last output,
// when the state flipped and the last HistoryLen results oldest first, while the
// thresholds behave as Observe's.
func TestRecordKeepsHistory(t *testing.T) {
	tr := NewTracker(2, 3)
	t0 := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	at := func(i int) time.Time { return t0.Add(time.Duration(i) * time.Second) }

	s := tr.State()
	if _, ok := s.Last(); ok || len(s.History()) != 0 || s.Results != 0 || !s.Changed.IsZero() {
		t.Fatalf("new tracker state = %+v", s)
	}
	tr.Record(at(0), true, "")
	if changed := tr.Record(at(1), true, ""); !changed {
		t.Fatal("second pass with rise 2 did not make the check healthy")
	}
	tr.Record(at(2), false, "status 500, want 2xx")
	s = tr.State()
	if !s.Healthy || s.Passes != 0 || s.Failures != 1 || s.Rise != 2 || s.Fall != 3 || s.Results != 3 {
		t.Fatalf("after pass, pass, fail: %+v", s)
	}
	if s.Output != "status 500, want 2xx" || !s.Changed.Equal(at(1)) {
		t.Fatalf("output %q changed %v, want the failure's output and the second pass's time", s.Output, s.Changed)
	}
	if last, ok := s.Last(); !ok || last.OK || !last.At.Equal(at(2)) {
		t.Fatalf("last = %+v %v", last, ok)
	}

	// Past HistoryLen results the oldest go, and the rest stay in order.
	for i := 3; i < 3+HistoryLen+2; i++ {
		tr.Record(at(i), i%2 == 0, "")
	}
	s = tr.State()
	h := s.History()
	if len(h) != HistoryLen {
		t.Fatalf("history holds %d results, want %d", len(h), HistoryLen)
	}
	for i, r := range h {
		want := at(5 + i)
		if !r.At.Equal(want) || r.OK != ((5+i)%2 == 0) {
			t.Fatalf("history[%d] = %+v, want at %v ok %v", i, r, want, (5+i)%2 == 0)
		}
	}
	if s.Output != "" {
		t.Fatalf("a pass left output %q", s.Output)
	}
}

// TestRecordClipsOutput: a long output is cut to MaxOutput bytes at a rune
// boundary and marked, so a page never shows half a character or a whole body.
func TestRecordClipsOutput(t *testing.T) {
	tr := NewTracker(1, 1)
	long := strings.Repeat("é", MaxOutput) // two bytes each: a cut can land inside one
	tr.Record(time.Now(), false, long)
	out := tr.State().Output
	if len(out) > MaxOutput || !utf8.ValidString(out) || !strings.HasSuffix(out, "…") {
		t.Fatalf("clipped output: %d bytes, valid UTF-8 %v, ends %q", len(out), utf8.ValidString(out), out[len(out)-4:])
	}
	short := "exit status 1: connection refused"
	tr.Record(time.Now(), false, short)
	if got := tr.State().Output; got != short {
		t.Fatalf("short output = %q", got)
	}
}

// TestRecordAllocatesNothing: the history is a fixed ring inside the tracker, so a
// result with a short output, and a copy of the state, cost no allocation.
func TestRecordAllocatesNothing(t *testing.T) {
	tr := NewTracker(2, 2)
	now := time.Now()
	if n := testing.AllocsPerRun(100, func() { tr.Record(now, false, "connection refused") }); n != 0 {
		t.Errorf("Record allocates %.0f times, want 0", n)
	}
	var s State
	if n := testing.AllocsPerRun(100, func() { s = tr.State() }); n != 0 {
		t.Errorf("State allocates %.0f times, want 0", n)
	}
	_ = s
}
