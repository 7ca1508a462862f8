package agent

import (
	"context"
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
	lastErr  []error
	seen     []bool             // each check has produced a result
	stop     context.CancelFunc // stops the entry's check goroutines

	// registered: the last successful write for the key registered it. maybe: a
	// register was attempted and no unregister has succeeded since, so shutdown must
	// remove it.
	registered, maybe bool
	written           endpoint.Endpoint // what the last successful register wrote
	refreshAt         time.Time         // zero: no refresh due (no TTL, or not registered)
	retryAt           time.Time         // after a failed write: not before this
	failures          int
	reason            string // the gate's last answer, for status and logs
	would             bool   // dry-run: whether the gate would be open
}

func newEntry(m manifest.Entry) *entry {
	e := &entry{m: m, trackers: make([]*check.Tracker, len(m.Checks)), lastErr: make([]error, len(m.Checks)),
		seen: make([]bool, len(m.Checks))}
	for i, c := range m.Checks {
		e.trackers[i] = check.NewTracker(c.Rise, c.Fall)
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

func (e *entry) status() EntryStatus {
	s := EntryStatus{Key: e.m.Endpoint.Key(), Source: e.source, Healthy: e.healthy(), Registered: e.registered, Reason: e.reason}
	for i, c := range e.m.Checks {
		cs := CheckStatus{Check: c.String(), Healthy: e.trackers[i].Healthy()}
		if e.lastErr[i] != nil {
			cs.LastError = e.lastErr[i].Error()
		}
		s.Checks = append(s.Checks, cs)
	}
	return s
}

// refreshInterval is how long a registration may go unrefreshed; zero means it never
// needs refreshing (no TTL, or "never").
func refreshInterval(ttl endpoint.TTL) time.Duration {
	return ttl.Duration() / RefreshFraction
}
