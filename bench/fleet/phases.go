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

// agentCount is an agents process's answer to "count".
type agentCount struct{ Writes, Batches, Failures int }

// agentWrites sums the endpoint writes every agents process has had acknowledged.
func (f *fleet) agentWrites() (int, error) {
	total := 0
	for _, p := range f.agents {
		rest, err := p.call("count", "count", 10*time.Second)
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
		if c0.puts >= 0 && c1.puts >= 0 {
			puts = fmt.Sprintf("%.0f", rate(c1.puts-c0.puts, dt))
		}
		rows = append(rows, row{figure: "backend key writes/s (puts)", value: puts,
			how: "etcd_mvcc_put_total delta on one member's /metrics: one per key written"})
	} else {
		rows = append(rows, row{figure: "backend writes/s (stream messages)", value: fmt.Sprintf("%.0f", rate(float64(c1.writes-c0.writes), dt)),
			how: "delta of the registry stream's last sequence (stream info): one per stored message"})
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

// registrarRSS reads every registrar process's resident set.
func (f *fleet) registrarRSS() ([]row, error) {
	var sum, lo, hi float64
	n := 0
	for _, rs := range f.registrars {
		for _, p := range rs {
			if !p.alive() {
				continue
			}
			kb, err := vmRSS(p.pid())
			if err != nil {
				return nil, err
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
		return nil, errors.New("no registrar is running")
	}
	held := f.o.clusters * f.o.endpoints
	mean := sum / float64(n)
	return []row{
		{figure: "registrar RSS", value: fmt.Sprintf("mean %.0f MiB (min %.0f, max %.0f, %d processes)", mean, lo, hi, n),
			how: "VmRSS of /proc/<pid>/status of each registrar process, at the end of the window"},
		{figure: "registrar RSS per 100,000 endpoints", value: fmt.Sprintf("%.0f MiB", mean*100000/float64(held)),
			how: fmt.Sprintf("mean RSS × 100,000 / %d, the endpoints in the shared registry, which each registrar's view holds (baseline included)", held)},
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

// markAll opens a loss window in every agents process.
func (f *fleet) markAll() error {
	for _, p := range f.agents {
		if _, err := p.call("mark", "marked", 10*time.Second); err != nil {
			return err
		}
	}
	return nil
}

// lossAccount closes a loss window: what every watcher lost, the writes' longest
// gap, and what the backend is missing.
type lossAccount struct {
	watched, backendMissing int
	lost                    int
	sample                  []string
	gap                     time.Duration
	failures                int
}

func (f *fleet) account(ctx context.Context) (lossAccount, error) {
	var a lossAccount
	for _, p := range f.agents {
		rest, err := p.call("report", "report", 10*time.Second)
		if err != nil {
			return a, err
		}
		var r lossReport
		if err := json.Unmarshal([]byte(rest), &r); err != nil {
			return a, fmt.Errorf("%s: report %q: %w", p.name, rest, err)
		}
		a.watched += r.Expected
		a.lost += r.Lost
		a.sample = append(a.sample, r.LostSample...)
		a.gap = max(a.gap, time.Duration(r.GapMs)*time.Millisecond)
		a.failures += r.Failures
	}
	for c := range f.o.clusters {
		miss, err := f.obs.missing(ctx, c, f.o.endpoints, f.o.perAgent)
		if err != nil {
			return a, fmt.Errorf("backend list of %s: %w", clusterName(c), err)
		}
		a.backendMissing += len(miss)
		a.sample = append(a.sample, miss[:min(len(miss), 3)]...)
	}
	return a, nil
}

func (a lossAccount) rows(phase string) []row {
	lost := fmt.Sprintf("%d of %d watched", a.lost, a.watched)
	if len(a.sample) > 0 {
		lost += " (e.g. " + strings.Join(a.sample[:min(len(a.sample), 3)], ", ") + ")"
	}
	return []row{
		{phase: phase, figure: "entries lost (watchers)", value: lost, ok: goal(a.lost == 0),
			how: "expected entries a watcher in another cluster saw removed during the window, or does not see at its end"},
		{phase: phase, figure: "entries missing on the backend", value: strconv.Itoa(a.backendMissing), ok: goal(a.backendMissing == 0),
			how: "expected entries absent from a List of the backend at the end of the window"},
	}
}

// replica SIGKILLs registrar 0 of c1 and times the re-homing of the agents that
// wrote through it.
func (f *fleet) replica(ctx context.Context) ([]row, error) {
	if f.o.registrars < 2 {
		return []row{{phase: "replica", figure: "replica loss", value: "skipped", how: "needs -registrars 2 or more: no replica to re-home to"}}, nil
	}
	if err := f.markAll(); err != nil {
		return nil, err
	}
	victim := f.registrars[0][0]
	f.log.Info("replica: SIGKILL", "registrar", victim.name)
	t0 := time.Now()
	if err := victim.kill(); err != nil {
		return nil, err
	}
	sent := time.Now()
	rest, err := f.agents[0].call("rehome 0", "rehomed", 90*time.Second)
	if err != nil {
		return nil, err
	}
	var rh struct{ Clients, Failed, Ms int }
	if err := json.Unmarshal([]byte(rest), &rh); err != nil {
		return nil, fmt.Errorf("rehomed %q: %w", rest, err)
	}
	rehomed := sent.Sub(t0) + time.Duration(rh.Ms)*time.Millisecond
	f.log.Info("replica: agents re-homed; watching for losses", "in", rehomed, "for", f.o.lossWindow)
	if err := sleep(ctx, time.Until(t0.Add(f.o.lossWindow))); err != nil {
		return nil, err
	}
	a, err := f.account(ctx)
	if err != nil {
		return nil, err
	}
	rows := []row{{phase: "replica", figure: "agents re-homed after SIGKILL of " + victim.name,
		value: fmt.Sprintf("%s (%d connections, %d not re-homed)", ms(rehomed), rh.Clients, rh.Failed), ok: goal(rh.Failed == 0),
		how: "from the kill until each connection that wrote through the replica had a write acknowledged through another"}}
	return append(rows, a.rows("replica")...), nil
}

// member SIGKILLs one backend member and measures the writes' longest gap.
func (f *fleet) member(ctx context.Context) ([]row, error) {
	lead, err := f.obs.leader(ctx, f.members)
	if err != nil {
		return nil, err
	}
	target, role := lead, "the leader"
	if f.o.backend == "jetstream" {
		role = "the registry stream's leader"
	}
	if f.o.member == "follower" {
		target, role = (lead+1)%backendMembers, "a follower"
	}
	if err := f.markAll(); err != nil {
		return nil, err
	}
	victim := f.members[target]
	var survivors []string
	for i, m := range f.members {
		if i != target {
			survivors = append(survivors, m.addr)
		}
	}
	cnt, err := newCounter(f.o.backend, survivors)
	if err != nil {
		return nil, err
	}
	defer cnt.close()
	end := time.Now().Add(f.o.lossWindow)
	commits := make(chan commitGap, 1)
	go func() { commits <- commitGapOf(ctx, cnt, end) }()
	_ = sleep(ctx, time.Second) // the poller's baseline: commits before the kill
	f.log.Info("member: SIGKILL", "member", victim.name, "role", role)
	killed := time.Now()
	if err := victim.kill(); err != nil {
		return nil, err
	}
	if err := sleep(ctx, time.Until(end)); err != nil {
		return nil, err
	}
	g := <-commits
	a, err := f.account(ctx)
	if err != nil {
		return nil, err
	}
	rows := []row{
		{phase: "member", figure: fmt.Sprintf("backend write gap after SIGKILL of %s (%s)", victim.name, role), value: fmt.Sprintf("%s (from %+.1f s after the kill)", ms(g.longest), g.from.Sub(killed).Seconds()),
			how: fmt.Sprintf("longest time the backend's write counter (revision / last sequence) did not advance, polled every %s through the surviving members from 1 s before the kill to %s after (%d polls failed)", commitPoll, f.o.lossWindow-time.Second, g.failed)},
		{phase: "member", figure: "registrar acknowledgement gap", value: ms(a.gap),
			how: "longest time between two writes acknowledged to one agents process in the same window: registrars acknowledge before they persist, so this shows what agents felt"},
		{phase: "member", figure: "failed write batches", value: strconv.Itoa(a.failures), how: "agents' batches that returned an error (each retried)"},
	}
	return append(rows, a.rows("member")...), nil
}

// commitPoll is how often the member phase reads the backend's write counter; at
// steady state the registrars flush every 100 ms, so the counter moves between
// most polls.
const commitPoll = 50 * time.Millisecond

// commitGap is what the poller saw.
type commitGap struct {
	longest time.Duration
	from    time.Time // when the longest gap began: the last advance before it
	failed  int
}

// commitGap polls the backend's write counter until end and returns the longest
// time between two observed advances (a read that fails or times out advances
// nothing). The time from the last advance to end counts too: a backend that never
// came back has a gap that long.
func commitGapOf(ctx context.Context, cnt *counter, end time.Time) commitGap {
	var g commitGap
	var last uint64
	lastAdvance := time.Now()
	for time.Now().Before(end) && ctx.Err() == nil {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		c, err := cnt.read(pctx, nil)
		cancel()
		switch {
		case err != nil:
			g.failed++
		case c.writes != last:
			if d := c.at.Sub(lastAdvance); d > g.longest {
				g.longest, g.from = d, lastAdvance
			}
			last, lastAdvance = c.writes, c.at
		}
		_ = sleep(ctx, commitPoll)
	}
	if d := time.Since(lastAdvance); d > g.longest {
		g.longest, g.from = d, lastAdvance
	}
	return g
}
