package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// A fault schedule is planned from the seed before anything starts: three lanes
// (registry, control plane, data plane), each a sequence of faults with planned start
// offsets, targets and hold times. The lanes run concurrently, so faults of different
// lanes overlap (a registrar killed while a control plane restarts); within a lane
// they follow each other. The same seed gives the same schedule; the wall-clock
// moments drift when injecting or healing takes longer than planned (a restarted
// etcd replaying its WAL), and a lane never starts a fault before the previous one is
// healed.

type faultKind string

const (
	killRegistrar     faultKind = "kill-registrar"
	killAllRegistrars faultKind = "kill-all-registrars"
	killBackend       faultKind = "kill-backend"
	killBoth          faultKind = "kill-backend+registrar" // the registrar restarts while the backend is still down
	// killHolding SIGKILLs the registrar holding the most agents' entries and keeps
	// it down until its hold has run out: they live on only if the agents re-home
	// and a surviving replica takes them over (rehome.go).
	killHolding     faultKind = "kill-holding-registrar"
	stallWatcher    faultKind = "stall-watcher"
	freezeRegistrar faultKind = "freeze-registrar" // SIGSTOP: a hung process, connections stay open
	freezeBackend   faultKind = "freeze-backend"
	calm            faultKind = "calm" // no fault: a quiet window for the mid-run sampler
	restartCP       faultKind = "restart-controlplane"
	duplicateNode   faultKind = "duplicate-node"
	killDPNode      faultKind = "kill-dp-node"
	killDPNodes     faultKind = "kill-dp-nodes"
	crashed         faultKind = "unexpected-exit" // not injected: a child died by itself
)

type fault struct {
	lane    string
	kind    faultKind
	targets []int // registrar replica or node indexes
	member  int   // the backend member a backend fault hits (0 of 1 without the network nemesis)
	latency int   // a slow link's, in milliseconds
	at      time.Duration
	hold    time.Duration
}

type faultRecord struct {
	fault
	target     string
	start, end time.Duration // actual, from the soak's start
	dropped    int64         // packets a cut dropped
	err        string
}

type laneSpec struct {
	name     string
	gap      [2]time.Duration
	kinds    []faultKind
	weights  []int
	holds    map[faultKind][2]time.Duration
	maxCount map[faultKind]int // how many targets the kind takes at most
}

func lanes(network bool, livenessTTL time.Duration) []laneSpec {
	ls := []laneSpec{
		{
			name:    "registry",
			gap:     [2]time.Duration{2 * time.Second, 8 * time.Second},
			kinds:   []faultKind{killRegistrar, killAllRegistrars, killBackend, killBoth, stallWatcher, calm, freezeRegistrar, freezeBackend},
			weights: []int{4, 1, 3, 1, 2, 2, 2, 2},
			holds: map[faultKind][2]time.Duration{
				killRegistrar: {500 * time.Millisecond, 4 * time.Second}, killAllRegistrars: {time.Second, 4 * time.Second},
				killBackend: {time.Second, 6 * time.Second}, killBoth: {time.Second, 4 * time.Second}, stallWatcher: {2 * time.Second, 10 * time.Second},
				calm: {20 * time.Second, 30 * time.Second}, freezeRegistrar: {time.Second, 8 * time.Second}, freezeBackend: {time.Second, 8 * time.Second},
			},
		},
		{
			name:  "controlplane",
			gap:   [2]time.Duration{3 * time.Second, 10 * time.Second},
			kinds: []faultKind{restartCP, duplicateNode}, weights: []int{1, 1},
			holds: map[faultKind][2]time.Duration{restartCP: {200 * time.Millisecond, 2 * time.Second}, duplicateNode: {time.Second, 6 * time.Second}},
		},
		{
			name:  "dataplane",
			gap:   [2]time.Duration{2 * time.Second, 6 * time.Second},
			kinds: []faultKind{killDPNode, killDPNodes}, weights: []int{3, 1},
			holds:    map[faultKind][2]time.Duration{killDPNode: {500 * time.Millisecond, 4 * time.Second}, killDPNodes: {500 * time.Millisecond, 4 * time.Second}},
			maxCount: map[faultKind]int{killDPNodes: 3},
		},
	}
	if livenessTTL > 0 {
		ls[0] = withHoldingKills(ls[0], livenessTTL)
	}
	if network {
		ls = append(ls, networkLane())
	}
	return ls
}

// withHoldingKills adds the kill of a holding registrar to the registry lane. It
// stays down 2 to 6 s longer than its hold's TTL: etcd expires a lease within a
// second of its TTL, so the hold has run out, and every entry it held is gone unless
// another replica took it over, before the victim returns.
func withHoldingKills(l laneSpec, livenessTTL time.Duration) laneSpec {
	l.kinds = append(append([]faultKind(nil), l.kinds...), killHolding)
	l.weights = append(append([]int(nil), l.weights...), 3)
	holds := make(map[faultKind][2]time.Duration, len(l.holds)+1)
	for k, h := range l.holds {
		holds[k] = h
	}
	holds[killHolding] = [2]time.Duration{livenessTTL + 2*time.Second, livenessTTL + 6*time.Second}
	l.holds = holds
	return l
}

// shape is what a schedule is planned for: the counts of registrar replicas, backend
// members and data-plane nodes, whether the network nemesis runs, and the
// registrars' liveness TTL (0: they hold nothing, and no holding registrar is killed).
type shape struct {
	replicas, members, nodes int
	network                  bool
	livenessTTL              time.Duration
}

// plan draws every lane's schedule for duration from seed; gapScale stretches (> 1)
// or shrinks (< 1) the gaps between faults. It depends on nothing but its arguments,
// and without the network nemesis and liveness it draws what it drew before either
// was there.
func plan(seed uint64, duration time.Duration, sh shape, gapScale float64) [][]fault {
	replicas, nodes := sh.replicas, sh.nodes
	var out [][]fault
	for i, l := range lanes(sh.network, sh.livenessTTL) {
		l.gap[0] = time.Duration(float64(l.gap[0]) * gapScale)
		l.gap[1] = time.Duration(float64(l.gap[1]) * gapScale)
		rng := rand.New(rand.NewPCG(seed, uint64(i)))
		between := func(r [2]time.Duration) time.Duration { return r[0] + time.Duration(rng.Int64N(int64(r[1]-r[0])+1)) }
		var fs []fault
		for t := between(l.gap); t < duration; {
			k := pick(rng, l.kinds, l.weights)
			f := fault{lane: l.name, kind: k, at: t, hold: between(l.holds[k])}
			switch k {
			case killRegistrar, killBoth, freezeRegistrar, killHolding:
				// killHolding's target is only a fallback: the victim is chosen when
				// it strikes, as the replica holding the most entries then.
				f.targets = []int{rng.IntN(replicas)}
			case duplicateNode, killDPNode:
				f.targets = []int{rng.IntN(nodes)}
			case killDPNodes:
				f.targets = rng.Perm(nodes)[:2+rng.IntN(l.maxCount[k]-1)]
			}
			if sh.members > 1 {
				drawNetwork(rng, &f, sh)
			}
			fs = append(fs, f)
			t += f.hold + between(l.gap)
		}
		out = append(out, fs)
	}
	return out
}

// drawNetwork draws the targets of the network nemesis's faults, and the member a
// backend fault hits when there are several.
func drawNetwork(rng *rand.Rand, f *fault, sh shape) {
	switch f.kind {
	case killBackend, freezeBackend, killBoth, isolateMember:
		f.member = rng.IntN(sh.members)
	case partition, oneWayCut:
		// Any two of the members, the registrars and the soak's namespace (the
		// agents), which is index members+replicas; the agents talk to no member,
		// so a pair of the two becomes the agents and a registrar.
		host := sh.members + sh.replicas
		p := rng.Perm(host + 1)[:2]
		for i, j := range [2]int{1, 0} {
			if p[i] == host && p[j] < sh.members {
				p[j] = sh.members + p[j]%sh.replicas
			}
		}
		f.targets = p
	case registrarFromBackend, registrarFromAgents:
		f.targets = []int{rng.IntN(sh.replicas)}
	case slowLink, lossyLink, narrowLink:
		f.targets = []int{rng.IntN(sh.replicas), rng.IntN(2)}
		f.latency = 150 + rng.IntN(750)
	}
}

func pick(rng *rand.Rand, kinds []faultKind, weights []int) faultKind {
	total := 0
	for _, w := range weights {
		total += w
	}
	n := rng.IntN(total)
	for i, w := range weights {
		if n < w {
			return kinds[i]
		}
		n -= w
	}
	return kinds[len(kinds)-1]
}

// injector applies faults to the running system and heals them.
type injector struct {
	s     *system
	start time.Time
	log   *slog.Logger
	q     *quiet // registry faults in progress, for the sampler
	// calming is set while the registry lane holds a calm window; the network lane
	// starts no fault meanwhile, and the window starts once the network fault in
	// progress (netBusy) has healed, so that the sampler gets its quiet.
	calming, netBusy atomic.Bool

	mu      sync.Mutex
	records []faultRecord
}

func (in *injector) record(r faultRecord) {
	in.mu.Lock()
	in.records = append(in.records, r)
	in.mu.Unlock()
}

func (in *injector) sorted() []faultRecord {
	in.mu.Lock()
	defer in.mu.Unlock()
	out := append([]faultRecord(nil), in.records...)
	sort.SliceStable(out, func(i, j int) bool { return out[i].start < out[j].start })
	return out
}

// runLane executes one lane's faults until stop ends; a fault in progress then is
// healed at once.
func (in *injector) runLane(stop context.Context, fs []fault) {
	for _, f := range fs {
		if wait := time.Until(in.start.Add(f.at)); wait > 0 {
			select {
			case <-stop.Done():
				return
			case <-time.After(wait):
			}
		}
		if !in.settle(stop, f) {
			return
		}
		f = in.s.resolve(f)
		r := faultRecord{fault: f, target: in.s.describe(f), start: time.Since(in.start)}
		in.log.Info("fault", "lane", f.lane, "kind", f.kind, "target", r.target, "hold", f.hold.Round(time.Millisecond))
		registry := (f.lane == "registry" || f.lane == "network") && f.kind != calm
		if registry {
			in.q.begin()
		}
		err := in.s.inject(f)
		if err == nil {
			select {
			case <-stop.Done():
			case <-time.After(f.hold):
			}
		}
		dropped, herr := in.s.heal(f)
		err = errors.Join(err, herr)
		r.dropped = dropped
		if registry {
			in.q.end()
		}
		if f.kind == calm {
			in.calming.Store(false)
		}
		if f.lane == "network" {
			in.netBusy.Store(false)
		}
		r.end = time.Since(in.start)
		if err != nil {
			r.err = err.Error()
			in.log.Warn("fault injection or healing failed", "kind", f.kind, "err", err)
		}
		in.record(r)
	}
}

// settle holds a network fault back while a calm window is on, and a calm window
// until no network fault is under way; it reports false once stop ends.
func (in *injector) settle(stop context.Context, f fault) bool {
	var wait func() bool
	switch {
	case f.lane == "network":
		wait = func() bool { return in.calming.Load() }
	case f.kind == calm:
		in.calming.Store(true)
		wait = func() bool { return in.netBusy.Load() }
	}
	for wait != nil && wait() {
		select {
		case <-stop.Done():
			return false
		case <-time.After(100 * time.Millisecond):
		}
	}
	if f.lane == "network" {
		in.netBusy.Store(true)
	}
	return stop.Err() == nil
}

// watchChildren reports children that die without being killed, and restarts them.
func (in *injector) watchChildren(stop context.Context) {
	t := time.NewTicker(500 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-stop.Done():
			return
		case <-t.C:
		}
		for _, p := range in.s.procs() {
			if p.exitedOnItsOwn() {
				now := time.Since(in.start)
				in.q.begin()
				err := p.start()
				in.q.end()
				r := faultRecord{fault: fault{lane: "-", kind: crashed}, target: p.name, start: now, end: time.Since(in.start)}
				if err != nil {
					r.err = err.Error()
				}
				in.log.Error("child exited by itself; restarted", "child", p.name, "log", p.log, "restart_err", err)
				in.record(r)
			}
		}
	}
}

func formatFaults(rs []faultRecord) string {
	var b strings.Builder
	for _, r := range rs {
		fmt.Fprintf(&b, "  %8s → %8s  %-12s %-20s %s", r.start.Round(10*time.Millisecond), r.end.Round(10*time.Millisecond), r.lane, r.kind, r.target)
		if r.kind != crashed {
			fmt.Fprintf(&b, " (planned at %s, hold %s)", r.at.Round(10*time.Millisecond), r.hold.Round(10*time.Millisecond))
		}
		if cutKinds[r.kind] {
			fmt.Fprintf(&b, " dropped %d packets", r.dropped)
		}
		if r.err != "" {
			fmt.Fprintf(&b, " ERROR: %s", r.err)
		}
		b.WriteByte('\n')
	}
	return b.String()
}

func countFaults(rs []faultRecord) string {
	n := map[faultKind]int{}
	for _, r := range rs {
		n[r.kind]++
	}
	var parts []string
	for k, c := range n {
		parts = append(parts, fmt.Sprintf("%s %d", k, c))
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}
