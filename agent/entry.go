package agent

import (
	"context"
	"slices"
	"time"

	"github.com/switchboard-mesh/switchboard/agent/check"
	"github.com/switchboard-mesh/switchboard/agent/manifest"
	"github.com/switchboard-mesh/switchboard/endpoint"
)

// entry is the loop's state for one manifest entry. Only the loop goroutine touches it.
type entry struct {
	m        manifest.Entry
	source   string // "" for the manifest, else the SetSource name
	trackers []*check.Tracker
	// checks is what status publishes of the checks. Statuses already published
	// share it, so it is replaced (setCheck), never written in place; it changes
	// only when a check's result comes in, not on every step of the loop.
	checks []CheckStatus
	seen   []bool             // each check has produced a result
	stop   context.CancelFunc // stops the entry's check goroutines

	// registered: the last successful write for the key registered it. maybe: a
	// register was attempted and no unregister has succeeded since, so shutdown must
	// remove it.
	registered, maybe bool
	written           endpoint.Endpoint // what the last successful register wrote
	sent              endpoint.Endpoint // what the last register attempted, landed or not
	refreshAt         time.Time         // zero: no refresh due (no TTL, or not registered)
	retryAt           time.Time         // after a failed write: not before this
	failures          int
	reason            string    // the gate's last answer, for status and logs
	would             bool      // dry-run: whether the gate would be open
	since             time.Time // when reason last changed
	writeErr          string    // the last write's error while writes fail
}

func newEntry(m manifest.Entry) *entry {
	e := &entry{m: m, trackers: make([]*check.Tracker, len(m.Checks)), checks: make([]CheckStatus, len(m.Checks)),
		seen: make([]bool, len(m.Checks))}
	for i, c := range m.Checks {
		e.trackers[i] = check.NewTracker(c.Rise, c.Fall)
		e.checks[i] = CheckStatus{Check: c.String(), State: e.trackers[i].State()}
	}
	e.reason = "starting"
	return e
}

// healthy reports whether every check passes; no checks means it does.
func (e *entry) healthy() bool {
	for _, t := range e.trackers {
		if !t.Healthy() {
			return false
		}
	}
	return true
}

// pending reports whether every check that does not pass is still waiting for
// passes rather than failing (check.Tracker.Pending).
func (e *entry) pending() bool {
	for _, t := range e.trackers {
		if !t.Healthy() && !t.Pending() {
			return false
		}
	}
	return true
}

// due reports whether the registration must be written now: never written, changed
// since, or its refresh time has come.
func (e *entry) due(now time.Time) bool {
	if !e.registered || !endpoint.Equal(e.written, e.m.Endpoint) {
		return true
	}
	return !e.refreshAt.IsZero() && !now.Before(e.refreshAt)
}

// status is the entry's state as published after every step of the loop. It
// allocates nothing: the checks' part is the one setCheck keeps.
func (e *entry) status() EntryStatus {
	return EntryStatus{Key: e.m.Endpoint.Key(), Source: e.source, Healthy: e.healthy(), Registered: e.registered, Reason: e.reason,
		Held: e.m.Held != "", Since: e.since, WriteError: e.writeErr, Checks: e.checks,
		Region: e.m.Endpoint.Region, Zone: e.m.Endpoint.Zone, Health: e.m.Endpoint.Health}
}

// setCheck publishes check i's tracker as it now stands, with lastErr, the last
// result's error text ("" for a pass). Only the loop calls it, when a result comes
// in or the check cannot start; the copy costs one check's state once per result,
// where rebuilding every check's on every step cost them all each time.
func (e *entry) setCheck(i int, lastErr string) {
	cs := slices.Clone(e.checks)
	t := e.trackers[i]
	cs[i] = CheckStatus{Check: cs[i].Check, Healthy: t.Healthy(), LastError: lastErr, State: t.State()}
	e.checks = cs
}

// refreshInterval is how long a registration may go unrefreshed; zero means it never
// needs refreshing (no TTL, or "never").
func refreshInterval(ttl endpoint.TTL) time.Duration {
	return ttl.Duration() / RefreshFraction
}
