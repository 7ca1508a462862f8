package check

// Tracker applies rise and fall thresholds to a stream of results. It starts
// unhealthy: an entry is published only after its checks have proven it healthy,
// never on the strength of a check that has not run yet. Not safe for concurrent use.
type Tracker struct {
	rise, fall int
	healthy    bool
	failed     bool    // a result failed since the tracker started or was last healthy
	streak     int     // consecutive results that disagree with the current state
	hist       history // what Record keeps for status pages (history.go)
}

// NewTracker returns an unhealthy tracker; thresholds below 1 count as 1.
func NewTracker(rise, fall int) *Tracker {
	return &Tracker{rise: max(rise, 1), fall: max(fall, 1)}
}

// Observe records one result and reports whether the state changed.
func (t *Tracker) Observe(ok bool) (changed bool) {
	if !ok {
		t.failed = true
	}
	if ok == t.healthy {
		t.streak = 0
		return false
	}
	t.streak++
	need := t.rise
	if t.healthy {
		need = t.fall
	}
	if t.streak < need {
		return false
	}
	t.healthy, t.streak = ok, 0
	if ok {
		t.failed = false
	}
	return true
}

// Healthy reports the current state.
func (t *Tracker) Healthy() bool { return t.healthy }

// Pending reports whether the tracker is unhealthy only for want of passes: since
// it started or was last healthy, no result has failed (none may have come in yet).
// Passes climbing to rise after a failure are not pending, so that a check that
// alternates does not alternate the reason too.
func (t *Tracker) Pending() bool { return !t.healthy && !t.failed }
