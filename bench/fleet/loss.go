package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// The loss phases: SIGKILL a registrar replica or a backend member, then account
// for every entry over a window long enough for an unrefreshed one to expire.

// markAll opens a loss window in every agents process.
func (f *fleet) markAll() error {
	for _, p := range f.agents {
		if _, err := p.call("mark", "marked", answerWithin); err != nil {
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
		rest, err := p.call("report", "report", answerWithin)
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
	end := time.Now().Add(f.o.memberWindow)
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
			how: fmt.Sprintf("longest time the backend's write counter (revision / last sequence) did not advance, polled every %s through the surviving members from 1 s before the kill to %s after (%d polls failed)", commitPoll, f.o.memberWindow-time.Second, g.failed)},
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
