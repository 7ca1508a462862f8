package check

import "testing"

func TestTracker(t *testing.T) {
	tests := []struct {
		name       string
		rise, fall int
		results    string // p = pass, f = fail
		// state after each result: H healthy, P unhealthy but pending (no failure
		// since it started or was last healthy), U unhealthy after a failure
		want string
	}{
		{"starts unhealthy, rise 1", 1, 1, "p", "H"},
		{"fail keeps unhealthy", 1, 1, "ff", "UU"},
		{"fall 1 drops at once", 1, 1, "pfp", "HUH"},
		{"rise 3 needs three in a row", 3, 1, "pppp", "PPHH"},
		{"a failure resets the rise streak", 3, 1, "ppfppp", "PPUUUH"},
		{"fall 2 tolerates one failure", 1, 2, "pfpff", "HHHHU"},
		{"a pass resets the fall streak", 1, 3, "pffpfff", "HHHHHHU"},
		{"rise 2 fall 2", 2, 2, "ppffpp", "PHHUUH"},
		{"alternating, rise 1 fall 1", 1, 1, "pfpfpp", "HUHUHH"},
		{"rising after a failure is not pending", 2, 1, "ppfpp", "PHUUH"},
		{"zero thresholds count as 1", 0, 0, "pf", "HU"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr := NewTracker(tc.rise, tc.fall)
			if tr.Healthy() || !tr.Pending() {
				t.Fatal("new tracker is healthy, or not pending")
			}
			prev := false
			for i, r := range tc.results {
				changed := tr.Observe(r == 'p')
				got := tr.Healthy()
				if want := tc.want[i] == 'H'; got != want {
					t.Fatalf("after result %d (%s): healthy = %v, want %v", i+1, tc.results[:i+1], got, want)
				}
				if want := tc.want[i] == 'P'; tr.Pending() != want {
					t.Fatalf("after result %d (%s): pending = %v, want %v", i+1, tc.results[:i+1], tr.Pending(), want)
				}
				if changed != (got != prev) {
					t.Fatalf("after result %d: changed = %v, but state went %v -> %v", i+1, changed, prev, got)
				}
				prev = got
			}
		})
	}
}
