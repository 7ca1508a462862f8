package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// row is one line of the report.
type row struct {
	phase, figure, value, how string
	ok                        *bool // a figure with a goal: met or not
	load                      string
}

func goal(met bool) *bool { return &met }

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// answerWithin bounds how long an agents process may take to answer the parent's
// count, mark and report: at 500,000 endpoints on two cores, a process busy with
// its watchers' snapshots answers in tens of seconds.
const answerWithin = time.Minute

// agentCount is an agents process's answer to "count".
type agentCount struct{ Writes, Batches, Failures int }

// agentWrites sums the endpoint writes every agents process has had acknowledged.
func (f *fleet) agentWrites() (int, error) {
	total := 0
	for _, p := range f.agents {
		rest, err := p.call("count", "count", answerWithin)
		if err != nil {
			return 0, err
		}
		var c agentCount
		if err := json.Unmarshal([]byte(rest), &c); err != nil {
			return 0, fmt.Errorf("%s: count %q: %w", p.name, rest, err)
		}
		total += c.Writes
	}
	return total, nil
}

// steady counts the backend's writes over a window in which nothing changes: every
// write is a refresh.
func (f *fleet) steady(ctx context.Context) ([]row, error) {
	f.log.Info("steady: settling", "for", f.o.settle)
	if err := sleep(ctx, f.o.settle); err != nil {
		return nil, err
	}
	a0, err := f.agentWrites()
	if err != nil {
		return nil, err
	}
	c0, err := f.obs.read(ctx, f.members)
	if err != nil {
		return nil, err
	}
	f.log.Info("steady: counting", "for", f.o.duration)
	if err := sleep(ctx, f.o.duration); err != nil {
		return nil, err
	}
	c1, err := f.obs.read(ctx, f.members)
	if err != nil {
		return nil, err
	}
	a1, err := f.agentWrites()
	if err != nil {
		return nil, err
	}
	dt := c1.at.Sub(c0.at)
	total := f.o.clusters * f.o.endpoints
	expect := rate(float64(total), f.o.ttl/3)
	rows := []row{{
		figure: "agent entry writes/s", value: fmt.Sprintf("%.0f", rate(float64(a1-a0), dt)),
		how: fmt.Sprintf("endpoint registrations acknowledged by the registrars, all agents processes; a refresh every TTL/3 makes %d/(%s) = %.0f", total, f.o.ttl/3, expect),
	}}
	if f.o.backend == "etcd" {
		rows = append(rows, row{figure: "backend writes/s (revisions)", value: fmt.Sprintf("%.1f", rate(float64(c1.writes-c0.writes), dt)),
			how: "etcd revision delta over the window: one per committed transaction (a batch of puts is one)"})
		puts := "n/a (no member served /metrics)"
		var ok *bool
		if c0.puts >= 0 && c1.puts >= 0 {
			r := rate(c1.puts-c0.puts, dt)
			puts = fmt.Sprintf("%.1f", r)
			if f.o.livenessTTL > 0 { // held entries: at most one write per replica per second
				ok = goal(r <= float64(f.o.clusters*f.o.registrars))
			}
		}
		rows = append(rows, row{figure: "backend key writes/s (puts)", value: puts, ok: ok,
			how: "etcd_mvcc_put_total delta on one member's /metrics: one per key written; held by the registrars (liveness TTL on), the goal is at most one per replica per second"})
	} else {
		r := rate(float64(c1.writes-c0.writes), dt)
		var ok *bool
		if f.o.livenessTTL > 0 { // held entries: at most one write per replica per second
			ok = goal(r <= float64(f.o.clusters*f.o.registrars))
		}
		rows = append(rows, row{figure: "backend writes/s (stream messages)", value: fmt.Sprintf("%.1f", r), ok: ok,
			how: "delta of the registry stream's last sequence (stream info): one per stored message, the replicas' liveness messages included; held by the registrars (liveness TTL on), the goal is at most one per replica per second"})
	}
	rss, err := f.registrarRSS()
	if err != nil {
		return nil, err
	}
	rows = append(rows, rss...)
	for i := range rows {
		rows[i].phase = "steady"
	}
	return rows, nil
}

// rssMiB is the registrars' resident sets: mean, min and max over those running.
func (f *fleet) rssMiB() (mean, lo, hi float64, n int, err error) {
	var sum float64
	for _, rs := range f.registrars {
		for _, p := range rs {
			if !p.alive() {
				continue
			}
			kb, err := vmRSS(p.pid())
			if err != nil {
				return 0, 0, 0, 0, err
			}
			mib := float64(kb) / 1024
			if n == 0 || mib < lo {
				lo = mib
			}
			hi = max(hi, mib)
			sum += mib
			n++
		}
	}
	if n == 0 {
		return 0, 0, 0, 0, errors.New("no registrar is running")
	}
	return sum / float64(n), lo, hi, n, nil
}

// registrarRSS reports the registrars' resident sets, whole and per 100,000
// endpoints above what they held empty (f.emptyRSS, read before any registration).
func (f *fleet) registrarRSS() ([]row, error) {
	mean, lo, hi, n, err := f.rssMiB()
	if err != nil {
		return nil, err
	}
	held, what := float64(f.o.clusters*f.o.endpoints), "the endpoints in the shared registry, all of which each registrar's view holds"
	if f.o.hold == "demanded" {
		// Its own cluster's, the watched cluster's services (the loss watcher's) and
		// every cluster's probe.
		held = float64(min(f.o.clusters, 2)*f.o.endpoints + f.o.clusters)
		what = "the endpoints each registrar's view holds: its cluster's, the cluster its agents watch, and every cluster's probe"
	}
	return []row{
		{figure: "registrar RSS", value: fmt.Sprintf("mean %.0f MiB (min %.0f, max %.0f, %d processes; %.0f MiB before any registration)", mean, lo, hi, n, f.emptyRSS),
			how: "VmRSS of /proc/<pid>/status of each registrar process, at the end of the window"},
		{figure: "registrar RSS per 100,000 endpoints", value: fmt.Sprintf("%.0f MiB whole, %.0f MiB above empty", mean*100000/held, (mean-f.emptyRSS)*100000/held),
			how: fmt.Sprintf("mean RSS (whole, or less the mean before registration) × 100,000 / %.0f, %s", held, what)},
	}, nil
}

// vmRSS is a process's resident set in KiB.
func vmRSS(pid int) (int, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			return strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
		}
	}
	return 0, fmt.Errorf("pid %d: no VmRSS", pid)
}

// propagation writes changes in cluster c1 and times until every other cluster's
// watcher sees each (its own watcher in a fleet of one).
func (f *fleet) propagation(ctx context.Context) ([]row, error) {
	want := map[string]bool{}
	for c := 1; c < f.o.clusters; c++ {
		want[clusterName(c)] = true
	}
	if f.o.clusters == 1 {
		want[clusterName(0)] = true
	}
	var lat, acks []time.Duration
	missed := 0
	for k := range f.o.changes {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		d, ack, ok, err := f.oneChange(ctx, fmt.Sprintf("k%d", k+1), want)
		if err != nil {
			return nil, err
		}
		acks = append(acks, ack)
		if ok {
			lat = append(lat, d)
		} else {
			missed++
		}
		_ = sleep(ctx, 100*time.Millisecond)
	}
	return []row{
		{phase: "propagation", figure: "cross-cluster propagation", value: summarize(lat).String(),
			how: fmt.Sprintf("from the write's start in c1 until the last of %d other clusters' watchers saw it, over %d changes", len(want), f.o.changes)},
		{phase: "propagation", figure: "change write acknowledged", value: summarize(acks).String(), how: "the same writes, until the registrar acknowledged"},
		{phase: "propagation", figure: "changes not seen within 10 s", value: strconv.Itoa(missed), how: "by some watcher", ok: goal(missed == 0)},
	}, nil
}

// oneChange writes change id and waits (10 s at most) for every wanted cluster to
// see it.
func (f *fleet) oneChange(ctx context.Context, id string, want map[string]bool) (time.Duration, time.Duration, bool, error) {
	for len(f.seen) > 0 { // sightings of earlier changes, or of a change's initial state
		<-f.seen
	}
	rest, err := f.agents[0].call("change "+id, "changed", 15*time.Second)
	if err != nil {
		return 0, 0, false, err
	}
	var gotID string
	var startNS, ackNS int64
	if _, err := fmt.Sscan(rest, &gotID, &startNS, &ackNS); err != nil || gotID != id {
		return 0, 0, false, fmt.Errorf("changed %q: want id %s", rest, id)
	}
	start := time.Unix(0, startNS)
	got := map[string]time.Time{}
	deadline := time.After(10 * time.Second)
	for len(got) < len(want) {
		select {
		case s := <-f.seen:
			if s.id == id && want[s.cluster] {
				got[s.cluster] = s.at
			}
		case <-deadline:
			return 0, time.Duration(ackNS - startNS), false, nil
		case <-ctx.Done():
			return 0, 0, false, ctx.Err()
		}
	}
	var last time.Time
	for _, at := range got {
		if at.After(last) {
			last = at
		}
	}
	return last.Sub(start), time.Duration(ackNS - startNS), true, nil
}
