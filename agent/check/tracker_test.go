package check

import "testing"

func TestTracker(t *testing.T) {
	tests := []struct {
		name       string
		rise, fall int
		results    string // p = pass, f = fail
		want       string // state after each result: U unhealthy, H healthy
	}{
		{"starts unhealthy, rise 1", 1, 1, "p", "H"},
		{"fail keeps unhealthy", 1, 1, "ff", "UU"},
		{"fall 1 drops at once", 1, 1, "pfp", "HUH"},
		{"rise 3 needs three in a row", 3, 1, "pppp", "UUHH"},
		{"a failure resets the rise streak", 3, 1, "ppfppp", "UUUUUH"},
		{"fall 2 tolerates one failure", 1, 2, "pfpff", "HHHHU"},
		{"a pass resets the fall streak", 1, 3, "pffpfff", "HHHHHHU"},
		{"rise 2 fall 2", 2, 2, "ppffpp", "UHHUUH"},
		{"zero thresholds count as 1", 0, 0, "pf", "HU"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr := NewTracker(tc.rise, tc.fall)
			if tr.Healthy() {
				t.Fatal("new tracker is healthy")
			}
			prev := false
			for i, r := range tc.results {
				changed := tr.Observe(r == 'p')
				got := tr.Healthy()
				if want := tc.want[i] == 'H'; got != want {
					t.Fatalf("after result %d (%s): healthy = %v, want %v", i+1, tc.results[:i+1], got, want)
				}
				if changed != (got != prev) {
					t.Fatalf("after result %d: changed = %v, but state went %v -> %v", i+1, changed, prev, got)
				}
				prev = got
			}
		})
	}
}
