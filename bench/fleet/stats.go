package main

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"time"
)

// summary is a sample of durations reduced to what the report shows.
type summary struct {
	N             int
	P50, P99, Max time.Duration
}

// summarize computes nearest-rank percentiles: the p-th percentile is the smallest
// value with at least p% of the sample at or below it, so p99 of fewer than 100
// values is the maximum, never an interpolation between two.
func summarize(d []time.Duration) summary {
	if len(d) == 0 {
		return summary{}
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return summary{N: len(s), P50: percentile(s, 50), P99: percentile(s, 99), Max: s[len(s)-1]}
}

// percentile of sorted, by nearest rank; p in (0, 100].
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	return sorted[min(max(rank, 1), len(sorted))-1]
}

func (s summary) String() string {
	if s.N == 0 {
		return "no sample"
	}
	return fmt.Sprintf("p50 %s, p99 %s, max %s (n=%d)", ms(s.P50), ms(s.P99), ms(s.Max), s.N)
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000) }

// lostEntries are the expected entries a watcher stopped seeing during a window
// (vanished: removed at some point, even if back by the end: a consumer routed
// around them meanwhile) or does not see at its end (visible), sorted. Keys that
// vanished but were not expected (another cluster's, a probe) are not losses.
func lostEntries(expected []string, vanished, visible map[string]bool) []string {
	var lost []string
	for _, k := range expected {
		if vanished[k] || !visible[k] {
			lost = append(lost, k)
		}
	}
	sort.Strings(lost)
	return lost
}

// rate is n per second over d.
func rate(n float64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return n / d.Seconds()
}
