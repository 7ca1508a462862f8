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
	o.last[k] = ackRecord{kind: kind, at: time.Now(), agent: agent, tries: tries}
	o.acks.Add(1)
	o.byKind[kind].Add(1)
}

func (o *oracle) snapshot() map[endpoint.Key]endpoint.Endpoint {
	o.mu.Lock()
	defer o.mu.Unlock()
	return maps.Clone(o.want)
}

// acksAt is when each key's last acknowledged write was.
func (o *oracle) acksAt() map[endpoint.Key]time.Time {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := make(map[endpoint.Key]time.Time, len(o.last))
	for k, r := range o.last {
		out[k] = r.at
	}
	return out
}

func (o *oracle) describe(k endpoint.Key, start time.Time) string {
	o.mu.Lock()
	defer o.mu.Unlock()
	r, ok := o.last[k]
	if !ok {
		return "never written"
	}
	return fmt.Sprintf("last ack: %s by agent %d at +%s after %d tries", r.kind, r.agent, r.at.Sub(start).Round(time.Millisecond), r.tries)
}

// mismatch is one key on which a reader disagrees with the oracle.
type mismatch struct {
	key  endpoint.Key
	text string
}

// diff compares what a reader holds with the oracle, sorted by text; the texts name
// what was lost from the reader's point of view.
func diff(want map[endpoint.Key]endpoint.Endpoint, got map[endpoint.Key]endpoint.Endpoint) []mismatch {
	var out []mismatch
	for k, w := range want {
		g, ok := got[k]
		switch {
		case !ok:
			out = append(out, mismatch{k, fmt.Sprintf("missing %s (acknowledged register lost)", k)})
		case !endpoint.Equal(w, g):
			out = append(out, mismatch{k, fmt.Sprintf("stale %s: have %s, want %s (acknowledged update lost)", k, brief(g), brief(w))})
		}
	}
	for k, g := range got {
		if _, ok := want[k]; !ok {
			out = append(out, mismatch{k, fmt.Sprintf("unexpected %s = %s (acknowledged unregister lost, or never written)", k, brief(g))})
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
