package main

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/registry"
)

// oracle is the expected registry state: for every key, the last write an agent had
// acknowledged (Apply returned nil, or the key was not among an ApplyError's failed
// keys). Each key belongs to exactly one agent, which writes it one op at a time and
// retries a failed op until it is acknowledged, so the last acknowledged op is the
// state every reader must end up with. A write that returned an error is unknown
// until its retry is acknowledged; it never enters the oracle on its own.
type oracle struct {
	mu   sync.Mutex
	want map[endpoint.Key]endpoint.Endpoint // keys expected present
	last map[endpoint.Key]ackRecord         // every key ever acknowledged

	attempts atomic.Int64 // Apply calls
	acks     atomic.Int64 // ops acknowledged
	failures atomic.Int64 // Apply calls that returned an error (then retried)
	byKind   [3]atomic.Int64
	unacked  atomic.Int64 // ops given up on at the end: the oracle is no longer exact
}

type opKind int

const (
	opRegister opKind = iota
	opRefresh
	opUnregister
)

func (k opKind) String() string { return [...]string{"register", "refresh", "unregister"}[k] }

type ackRecord struct {
	kind  opKind
	at    time.Time
	agent int
	tries int
	// changed is when the key's state last changed: the last register of new
	// content or unregister. A refresh (the same content again) changes nothing, and
	// agents refresh every key every ttl/4, so the checks that wait for a write to
	// settle wait from here.
	changed time.Time
	ep      endpoint.Endpoint // the op's
}

func newOracle() *oracle {
	return &oracle{want: map[endpoint.Key]endpoint.Endpoint{}, last: map[endpoint.Key]ackRecord{}}
}

func (o *oracle) acked(agent int, kind opKind, op registry.Op, tries int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	k := op.Endpoint.Key()
	if op.Kind == registry.OpRegister {
		o.want[k] = op.Endpoint.Clone()
	} else {
		delete(o.want, k)
	}
	now := time.Now()
	changed := now
	if prev, ok := o.last[k]; ok && kind == opRefresh {
		changed = prev.changed
	}
	o.last[k] = ackRecord{kind: kind, at: now, agent: agent, tries: tries, changed: changed, ep: op.Endpoint.Clone()}
	o.acks.Add(1)
	o.byKind[kind].Add(1)
}

func (o *oracle) snapshot() map[endpoint.Key]endpoint.Endpoint {
	o.mu.Lock()
	defer o.mu.Unlock()
	return maps.Clone(o.want)
}

// changesAt is when each key's state last changed (see ackRecord.changed).
func (o *oracle) changesAt() map[endpoint.Key]time.Time {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := make(map[endpoint.Key]time.Time, len(o.last))
	for k, r := range o.last {
		out[k] = r.changed
	}
	return out
}

// written reports whether an agent ever had a write of k acknowledged.
func (o *oracle) written(k endpoint.Key) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	_, ok := o.last[k]
	return ok
}

// expect makes the oracle expect e without anyone writing it (--sabotage).
func (o *oracle) expect(e endpoint.Endpoint) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.want[e.Key()] = e
}

// removed returns an entry its agent unregistered, as it was, if there is one.
func (o *oracle) removed() (endpoint.Endpoint, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for k, r := range o.last {
		if _, live := o.want[k]; !live && r.kind == opUnregister {
			return r.ep.Clone(), true
		}
	}
	return endpoint.Endpoint{}, false
}

func (o *oracle) describe(k endpoint.Key, start time.Time) string {
	o.mu.Lock()
	defer o.mu.Unlock()
	r, ok := o.last[k]
	if !ok {
		return "never written"
	}
	return fmt.Sprintf("last ack: %s by agent %d at +%s after %d tries (last change at +%s)", r.kind, r.agent,
		r.at.Sub(start).Round(time.Millisecond), r.tries, r.changed.Sub(start).Round(time.Millisecond))
}

// mismatch is one key on which a reader disagrees with the oracle.
type mismatch struct {
	key  endpoint.Key
	kind mismatchKind
	text string
}

type mismatchKind int

const (
	absent     mismatchKind = iota // an acknowledged live entry missing
	stale                          // present with older content: an acknowledged update lost
	unexpected                     // present, the oracle expecting it absent
)

// tally counts a reader's mismatches as the final report names them: lost (an
// acknowledged live entry missing or stale), resurrected (an entry its agent
// unregistered, found again) and stray (an entry no agent ever wrote).
func tally(ms []mismatch, written func(endpoint.Key) bool) (lost, resurrected, stray int) {
	for _, m := range ms {
		switch {
		case m.kind != unexpected:
			lost++
		case written(m.key):
			resurrected++
		default:
			stray++
		}
	}
	return lost, resurrected, stray
}

// diff compares what a reader holds with the oracle, sorted by text; the texts name
// what was lost from the reader's point of view.
func diff(want map[endpoint.Key]endpoint.Endpoint, got map[endpoint.Key]endpoint.Endpoint) []mismatch {
	var out []mismatch
	for k, w := range want {
		g, ok := got[k]
		switch {
		case !ok:
			out = append(out, mismatch{k, absent, fmt.Sprintf("missing %s (acknowledged register lost)", k)})
		case !endpoint.Equal(w, g):
			out = append(out, mismatch{k, stale, fmt.Sprintf("stale %s: have %s, want %s (acknowledged update lost)", k, brief(g), brief(w))})
		}
	}
	for k, g := range got {
		if _, ok := want[k]; !ok {
			out = append(out, mismatch{k, unexpected, fmt.Sprintf("unexpected %s = %s (acknowledged unregister lost, or never written)", k, brief(g))})
		}
	}
	slices.SortFunc(out, func(a, b mismatch) int { return strings.Compare(a.text, b.text) })
	return out
}

// lines renders mismatches, each followed by what explains it when explain is set.
func lines(ms []mismatch, explain func(endpoint.Key) string) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.text
		if explain != nil {
			out[i] += " — " + explain(m.key)
		}
	}
	return out
}

func brief(e endpoint.Endpoint) string {
	return fmt.Sprintf("{node=%s weight=%d rev=%s}", e.Node, e.Weight, e.Annotations["rev"])
}

func byKey(eps []endpoint.Endpoint) (map[endpoint.Key]endpoint.Endpoint, []string) {
	out := make(map[endpoint.Key]endpoint.Endpoint, len(eps))
	var dups []string
	for _, e := range eps {
		if _, dup := out[e.Key()]; dup {
			dups = append(dups, "duplicate "+e.Key().String())
		}
		out[e.Key()] = e
	}
	return out, dups
}

// summarize keeps a report readable: the first n lines, then a count.
func summarize(lines []string, n int) string {
	if len(lines) <= n {
		return strings.Join(lines, "\n    ")
	}
	return strings.Join(lines[:n], "\n    ") + fmt.Sprintf("\n    … and %d more", len(lines)-n)
}
