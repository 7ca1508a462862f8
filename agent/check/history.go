package check

import (
	"time"
	"unicode/utf8"
)

// HistoryLen is how many recent results a Tracker keeps for status pages.
const HistoryLen = 10

// MaxOutput bounds, in bytes, the output a Tracker keeps of its last result: a
// page shows what failed, not a whole response body.
const MaxOutput = 512

// Result is one check run as a Tracker remembers it.
type Result struct {
	At time.Time
	OK bool
}

// history is what a Tracker keeps beyond its thresholds, for status pages. The
// ring is a fixed array inside the Tracker, so recording a result allocates
// nothing; only an output longer than MaxOutput is copied (clip).
type history struct {
	ring          [HistoryLen]Result
	next, n       int // where the next result goes; how many the ring holds
	passes, fails int // consecutive, whatever the state
	total         uint64
	output        string
	changed       time.Time // when the state last flipped
}

// Record is Observe for a result that came in at a time with an output (an
// error's text, or "" for a pass): the tracker also keeps it for State.
func (t *Tracker) Record(at time.Time, ok bool, output string) (changed bool) {
	h := &t.hist
	h.ring[h.next] = Result{At: at, OK: ok}
	h.next = (h.next + 1) % HistoryLen
	h.n = min(h.n+1, HistoryLen)
	h.total++
	if ok {
		h.passes, h.fails = h.passes+1, 0
	} else {
		h.passes, h.fails = 0, h.fails+1
	}
	h.output = clip(output)
	if changed = t.Observe(ok); changed {
		h.changed = at
	}
	return changed
}

// State is a copy of a tracker's state, safe to keep and read from any goroutine.
type State struct {
	Healthy bool
	// Pending: unhealthy only for want of passes (Tracker.Pending).
	Pending bool
	// Rise and Fall are the thresholds; Passes and Failures the results in a row
	// so far, the one toward the threshold that would flip the state being Passes
	// while unhealthy and Failures while healthy.
	Rise, Fall       int
	Passes, Failures int
	// Results counts every result recorded.
	Results uint64
	// Output is the last result's output, cut to MaxOutput bytes.
	Output string
	// Changed is when the state last flipped; zero if it never has.
	Changed time.Time
	recent  [HistoryLen]Result // oldest first
	n       int
}

// State returns the tracker's state; it copies a fixed-size value and allocates
// nothing.
func (t *Tracker) State() State {
	h := &t.hist
	s := State{Healthy: t.healthy, Pending: t.Pending(), Rise: t.rise, Fall: t.fall, Passes: h.passes, Failures: h.fails,
		Results: h.total, Output: h.output, Changed: h.changed, n: h.n}
	start := (h.next - h.n + HistoryLen) % HistoryLen
	for i := range h.n {
		s.recent[i] = h.ring[(start+i)%HistoryLen]
	}
	return s
}

// History returns the last HistoryLen results at most, oldest first.
func (s *State) History() []Result { return s.recent[:s.n] }

// Last returns the latest result; ok is false before the first.
func (s *State) Last() (r Result, ok bool) {
	if s.n == 0 {
		return Result{}, false
	}
	return s.recent[s.n-1], true
}

// clip cuts s to MaxOutput bytes at a rune boundary, marking the cut. The cut
// string is a new one, so a long output (up to 64 KiB of a command's) is not kept
// alive by the prefix shown.
func clip(s string) string {
	if len(s) <= MaxOutput {
		return s
	}
	const mark = "…"
	i := MaxOutput - len(mark)
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i] + mark
}
