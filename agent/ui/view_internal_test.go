package ui

import "testing"

// TestCounters: a check's counters read against the threshold that would flip it.
func TestCounters(t *testing.T) {
	for _, tc := range []struct {
		c    Check
		want string
	}{
		{Check{Rise: 2, Fall: 3}, "no result yet"},
		{Check{Results: 5, Healthy: true, Passes: 5, Rise: 2, Fall: 1}, "5 passes in a row; unhealthy after 1 failure"},
		{Check{Results: 5, Healthy: true, Failures: 1, Rise: 2, Fall: 3}, "1 of 3 failures before unhealthy"},
		{Check{Results: 1, Pending: true, Passes: 1, Rise: 3, Fall: 1}, "1 of 3 passes before healthy"},
		{Check{Results: 9, Failures: 1, Rise: 1, Fall: 1}, "1 failure in a row; healthy after 1 pass"},
	} {
		if got := counters(tc.c); got != tc.want {
			t.Errorf("counters(%+v) = %q, want %q", tc.c, got, tc.want)
		}
	}
}

// TestGateSummary: the gate over all entries is open when it is open for every
// one, closed when for none, partly open otherwise, with the commonest reason
// first.
func TestGateSummary(t *testing.T) {
	open := Entry{GateOpen: true}
	failing := Entry{Reason: "health checks failing"}
	held := Entry{Reason: "pod not Ready"}
	for _, tc := range []struct {
		entries     []Entry
		word, class string
	}{
		{nil, "closed", "gate-closed"},
		{[]Entry{open, open}, "open", "gate-open"},
		{[]Entry{failing, held}, "closed", "gate-closed"},
		{[]Entry{open, failing, held, failing}, "partly open", "gate-partly"},
	} {
		g := newView(State{Entries: tc.entries}, "", 0).Gate
		if g.Word() != tc.word || g.Class() != tc.class {
			t.Errorf("%d entries: %q %q, want %q %q", len(tc.entries), g.Word(), g.Class(), tc.word, tc.class)
		}
	}
	g := newView(State{Entries: []Entry{open, failing, held, failing}}, "", 0).Gate
	if len(g.Reasons) != 2 || g.Reasons[0] != (count{"health checks failing", 2}) || g.Reasons[1] != (count{"pod not Ready", 1}) {
		t.Errorf("reasons %+v", g.Reasons)
	}
}

// TestManyEntries: one rendering shows at most MaxEntries, and says so.
func TestManyEntries(t *testing.T) {
	s := State{Entries: make([]Entry, MaxEntries+10)}
	v := newView(s, "", 0)
	if len(v.Shown) != MaxEntries || v.Matched != MaxEntries+10 {
		t.Fatalf("shown %d of %d", len(v.Shown), v.Matched)
	}
}
