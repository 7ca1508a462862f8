// Command soak runs Switchboard under random faults for a set time and then checks
// that nothing acknowledged was lost and that every data-plane node holds exactly what
// the control plane intends.
//
// The registry side: a backend (etcd or nats-server with JetStream) and registrar
// replicas of cluster "east", each a child process of its own (this binary
// re-executed) so that a fault is a real SIGKILL; agents write through registrar
// clients while an oracle records every acknowledged write; watchers keep maps from
// Watch events. The control-plane side: a control plane on SQLite and data-plane
// controllers over in-memory datapaths (internal/cpharness). Faults come from a
// schedule drawn from the seed. When the time is up the faults stop, everything is
// healed, and every reader must agree with the oracle within --check-timeout.
//
// With --liveness-ttl (on by default) the registrars hold their agents' entries by
// the agents' sessions, and a fault kills the replica holding the most of them for
// longer than its hold lives: the entries survive only if their agents re-home and
// a surviving replica takes them over (rehome.go).
//
//	go run ./bench/soak --duration 1m --backend etcd
//	go run ./bench/soak --duration 10m --backend both --seed 42
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"
)

type options struct {
	duration     time.Duration
	seed         uint64
	backends     []string
	replicas     int
	agents       int
	keys         int
	watchers     int
	edges        int
	perGroup     int
	ttl          time.Duration
	livenessTTL  time.Duration // the registrars' --liveness-ttl; 0: off
	checkTimeout time.Duration
	keep         bool
	network      bool // the network nemesis: namespaces, three backend members, cuts and toxic links
	sabotage     bool
	replayFlags  string // the other flags given, for the replay line
	gapScale     float64
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "child" {
		os.Exit(childMain(os.Args[2:]))
	}
	var o options
	var backend, level, nemesisFlag string
	var seed int64
	flag.DurationVar(&o.duration, "duration", 10*time.Minute, "how long faults are injected")
	flag.Int64Var(&seed, "seed", 0, "seed of the fault schedule and the agents' writes (0: from the clock; printed)")
	flag.StringVar(&backend, "backend", "both", "registry backend: jetstream, etcd or both (one after the other)")
	flag.IntVar(&o.replicas, "registrars", 2, "registrar replicas")
	flag.IntVar(&o.agents, "agents", 6, "writing agents (registrar clients)")
	flag.IntVar(&o.keys, "keys", 40, "endpoints each agent owns")
	flag.IntVar(&o.watchers, "watchers", 3, "watching registrar clients; the first is the one that gets stalled")
	flag.IntVar(&o.edges, "edge-groups", 5, "edge groups around the hub group")
	flag.IntVar(&o.perGroup, "nodes-per-group", 4, "data-plane nodes per group")
	flag.DurationVar(&o.checkTimeout, "check-timeout", 10*time.Second, "how long the final state may take to agree once the faults are healed")
	flag.DurationVar(&o.ttl, "ttl", 0, "TTL of every registration (whole seconds); agents refresh each key every ttl/4 (default: 4s with --liveness-ttl, shorter than a holding registrar's kill, so that only a takeover keeps its entries; 1m without)")
	flag.DurationVar(&o.livenessTTL, "liveness-ttl", 5*time.Second, "the registrars' --liveness-ttl: they hold agents' entries by their sessions, and a holding one is killed for longer than this (0: off; else at least 3s)")
	flag.BoolVar(&o.sabotage, "sabotage", false, "check the checker: behind everyone's back, delete one expected endpoint from the backend and add a stray connection to a datapath before the final check; the run must FAIL")
	flag.Float64Var(&o.gapScale, "fault-gap-scale", 1, "multiplies the gaps between the faults of a lane (0.25: four times as many faults)")
	flag.StringVar(&nemesisFlag, "nemesis", "crash", "crash: processes killed, frozen and restarted; network: that, and each process in a network namespace of its own with three backend members, partitions, one-way cuts and slow or lossy links (needs root, ip and iptables)")
	flag.BoolVar(&o.keep, "keep", false, "keep the run's directory (data and logs) even when it passes")
	flag.StringVar(&level, "log-level", "info", "console log level: debug, info, warn, error")
	flag.Parse()
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		fmt.Fprintln(os.Stderr, "--log-level:", err)
		os.Exit(2)
	}
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lv})))
	switch backend {
	case "both":
		o.backends = []string{"etcd", "jetstream"}
	case "etcd", "jetstream":
		o.backends = []string{backend}
	default:
		fmt.Fprintf(os.Stderr, "--backend %q: want jetstream, etcd or both\n", backend)
		os.Exit(2)
	}
	switch nemesisFlag {
	case "crash":
	case "network":
		if why := networkUsable(); why != "" {
			fmt.Fprintln(os.Stderr, "--nemesis network:", why)
			os.Exit(2)
		}
		o.network = true
	default:
		fmt.Fprintf(os.Stderr, "--nemesis %q: want crash or network\n", nemesisFlag)
		os.Exit(2)
	}
	if o.replicas < 2 || o.agents < 1 || o.keys < 1 || o.watchers < 1 || o.edges < 1 || o.perGroup < 1 || o.duration <= 0 || o.gapScale <= 0 {
		fmt.Fprintln(os.Stderr, "need --registrars >= 2, --agents, --keys, --watchers, --edge-groups, --nodes-per-group >= 1 and a positive --duration and --fault-gap-scale")
		os.Exit(2)
	}
	if err := o.ttlDefaults(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	if seed == 0 {
		seed = time.Now().UnixNano() & (1<<53 - 1)
	}
	o.seed = uint64(seed)
	flag.Visit(func(f *flag.Flag) {
		if f.Name != "seed" && f.Name != "backend" {
			o.replayFlags += fmt.Sprintf(" --%s=%s", f.Name, f.Value)
		}
	})
	if !strings.Contains(o.replayFlags, "--duration") {
		o.replayFlags += " --duration=" + o.duration.String()
	}

	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	failed := false
	for _, b := range o.backends {
		pass, err := runOne(ctx, o, b)
		if err != nil {
			fmt.Printf("soak %s: ERROR: %v\n", b, err)
			failed = true
			continue
		}
		failed = failed || !pass
	}
	if failed {
		os.Exit(1)
	}
}

// ttlDefaults sets the registrations' TTL when --ttl was not given, and checks both.
// With liveness held, the TTL is shorter than a holding registrar stays down (its
// hold's TTL and 2 s at least), so that its entries would be gone by its return
// were they kept by their TTL: they live only if a surviving replica takes them over.
func (o *options) ttlDefaults() error {
	if o.livenessTTL != 0 && o.livenessTTL < 3*time.Second {
		return fmt.Errorf("--liveness-ttl %s: want 0 (off) or at least 3s", o.livenessTTL)
	}
	if o.ttl == 0 {
		o.ttl = time.Minute
		if o.livenessTTL > 0 {
			o.ttl = 4 * time.Second
		}
	}
	if o.ttl < time.Second || o.ttl%time.Second != 0 {
		return fmt.Errorf("--ttl %s: want whole seconds, at least 1s", o.ttl)
	}
	if o.livenessTTL > 0 && o.ttl >= o.livenessTTL+2*time.Second {
		slog.Warn("--ttl is not shorter than a holding registrar's kill: its entries could outlive it on their own TTL, and survive without a takeover",
			"ttl", o.ttl, "kill_at_least", o.livenessTTL+2*time.Second)
	}
	return nil
}

// runOne soaks one backend and prints its report; it reports whether it passed.
func runOne(ctx context.Context, o options, backend string) (bool, error) {
	log := slog.Default().With("backend", backend)
	log.Info("starting", "seed", o.seed, "duration", o.duration)
	s, err := newSystem(o, backend, log)
	if err != nil {
		return false, err
	}
	pass := false
	defer func() {
		s.close()
		if pass && !o.keep {
			_ = os.RemoveAll(s.dir)
		} else {
			fmt.Printf("data and logs kept in %s\n", s.dir)
		}
	}()
	schedule := plan(o.seed, o.duration, shape{replicas: o.replicas, members: len(s.members), nodes: len(s.fleet.nodes), network: o.network, livenessTTL: o.livenessTTL}, o.gapScale)
	s.start = time.Now()
	q := &quiet{since: s.start}
	in := &injector{s: s, start: s.start, log: log, q: q}
	sm := &sampler{s: s, q: q, log: log}

	stop, stopNow := context.WithTimeout(ctx, o.duration)
	defer stopNow()
	// Agents finish the batch in flight after the stop; this bounds how long.
	hard, hardCancel := context.WithTimeout(ctx, o.duration+2*time.Minute)
	defer hardCancel()
	watchCtx, stopWatching := context.WithCancel(context.Background())
	defer stopWatching()

	var agents, wrote, lanes, watchers sync.WaitGroup
	for _, w := range s.watchers {
		watchers.Go(func() { w.run(watchCtx) })
	}
	watchers.Go(func() { s.held.run(watchCtx) })
	for _, a := range s.agents {
		wrote.Add(1)
		agents.Go(func() { a.run(stop, hard, watchCtx, wrote.Done) })
	}
	for _, fs := range schedule {
		lanes.Go(func() { in.runLane(stop, fs) })
	}
	lanes.Go(func() { in.watchChildren(stop) })
	lanes.Go(func() { sm.run(stop) })
	progress := time.NewTicker(30 * time.Second)
	defer progress.Stop()
	for stop.Err() == nil {
		select {
		case <-stop.Done():
		case <-progress.C:
			log.Info("progress", "elapsed", time.Since(in.start).Round(time.Second), "faults", len(in.sorted()),
				"acks", s.oracle.acks.Load(), "failed_calls", s.oracle.failures.Load())
		}
	}
	lanes.Wait()
	stoppedAt := time.Since(in.start)
	log.Info("faults stopped; healing", "at", stoppedAt.Round(time.Millisecond))
	healErr := s.healAll()
	wrote.Wait()
	if ctx.Err() != nil {
		return false, fmt.Errorf("interrupted")
	}
	log.Info("writes done; checking", "heal_err", healErr)
	if o.sabotage {
		if err := s.sabotage(); err != nil {
			return false, fmt.Errorf("sabotage: %w", err)
		}
	}
	v := s.check(o.checkTimeout, o.steadyFor())
	stopWatching()
	watchers.Wait()
	agents.Wait()

	faults := in.sorted()
	pass = report(o, backend, s, faults, stoppedAt, v, healErr, sm)
	if o.network && cutPackets(faults) == 0 {
		pass = false
		return false, fmt.Errorf("setup error: the network nemesis never cut a pair (no cut dropped a packet); the run tested nothing it is for")
	}
	return pass, nil
}

// steadyFor is how long the backend must hold still after the final agreement: past
// an entry's TTL or a dead hold's (what a removal of a gone session's entries or an
// expired hold would take), and a replica's restore round (5 s) and sweep (1 s).
func (o options) steadyFor() time.Duration {
	return max(o.ttl, o.livenessTTL) + 6*time.Second
}

// cutPackets is how many packets the run's cuts dropped.
func cutPackets(faults []faultRecord) int64 {
	var n int64
	for _, r := range faults {
		if cutKinds[r.kind] {
			n += r.dropped
		}
	}
	return n
}

// report prints the run's account and returns whether it passed.
func report(o options, backend string, s *system, faults []faultRecord, stoppedAt time.Duration, v verdict, healErr error, sm *sampler) bool {
	or := s.oracle
	var b strings.Builder
	fmt.Fprintf(&b, "\n==== soak: backend %s, seed %d, duration %s, %d registrars, %d agents × %d keys (ttl %s), %d watchers, %d DP nodes; %s, GOMAXPROCS %d\n",
		backend, o.seed, o.duration, o.replicas, o.agents, o.keys, o.ttl, o.watchers, len(s.fleet.nodes), runtime.Version(), runtime.GOMAXPROCS(0))
	fmt.Fprintf(&b, "faults (%d; %s), stopped at %s:\n%s", len(faults), countFaults(faults), stoppedAt.Round(time.Millisecond), formatFaults(faults))
	if o.network {
		fmt.Fprintf(&b, "network nemesis: 3 backend members; cuts dropped %d packets in all\n", cutPackets(faults))
	}
	fmt.Fprintf(&b, "writes: %d Apply calls, %d failed and retried; %d ops acknowledged (register %d, refresh %d, unregister %d); %d never acknowledged\n",
		or.attempts.Load(), or.failures.Load(), or.acks.Load(), or.byKind[opRegister].Load(), or.byKind[opRefresh].Load(), or.byKind[opUnregister].Load(), or.unacked.Load())
	for _, a := range s.agents {
		for _, g := range a.gaveUp {
			fmt.Fprintf(&b, "  %s\n", g)
		}
	}
	var anomalies []string
	for _, w := range s.watchers {
		w.mu.Lock()
		fmt.Fprintf(&b, "watcher-%d: %d events, %d re-watches\n", w.id, w.events, w.rewatches)
		anomalies = append(anomalies, w.problems...)
		w.mu.Unlock()
	}
	if len(anomalies) > 0 {
		sort.Strings(anomalies)
		fmt.Fprintf(&b, "watch event anomalies (%d; not counted as failures):\n    %s\n", len(anomalies), summarize(anomalies, 10))
	}
	fmt.Fprintf(&b, "fleet: %s\n", s.fleet.cpCounts(context.Background()))
	if healErr != nil {
		fmt.Fprintf(&b, "healing after the faults failed: %v\n", healErr)
	}
	fmt.Fprintf(&b, "mid-run samples of the backend (registry quiet ≥ %s): %d taken, %d failed to list; acknowledged writes lost mid-run: %d; removed entries found again mid-run: %d\n",
		quietNeeded, sm.samples, sm.errors, len(sm.lost), len(sm.resurrected))
	if len(sm.lost)+len(sm.resurrected) > 0 {
		fmt.Fprintf(&b, "    %s\n", summarize(append(append([]string(nil), sm.lost...), sm.resurrected...), 12))
	}
	missing := s.rehomeAccount(&b)
	lost := v.lost + len(sm.lost) + len(missing)
	resurrected := v.resurrected + len(sm.resurrected)
	fmt.Fprintf(&b, "lost (acknowledged live entries missing: at the end %d, mid-run %d, at a holding registrar's return %d): %d\n", v.lost, len(sm.lost), len(missing), lost)
	fmt.Fprintf(&b, "resurrected (entries their agent unregistered, found again: at the end %d, mid-run %d): %d\n", v.resurrected, len(sm.resurrected), resurrected)
	if v.stray > 0 {
		fmt.Fprintf(&b, "stray (entries no agent wrote, in the backend at the end): %d\n", v.stray)
	}
	pass := v.ok() && healErr == nil && or.unacked.Load() == 0 && lost == 0 && resurrected == 0
	result := "PASS"
	if !pass {
		result = "FAIL"
	}
	fmt.Fprintf(&b, "result: %s — %s\n", result, v)
	fmt.Fprintf(&b, "replay: go run ./bench/soak --backend %s --seed %d%s\n", backend, o.seed, o.replayFlags)
	fmt.Print(b.String())
	return pass
}

// rehomeAccount writes the re-homing account into b and returns the acknowledged
// entries found missing as holding registrars returned.
func (s *system) rehomeAccount(b *strings.Builder) []string {
	logs := make([]string, len(s.registrars))
	for i, p := range s.registrars {
		logs[i] = p.log
	}
	ts, maxHeld := s.held.account()
	text, missing := rehomeReport(s.o.livenessTTL, ts, maxHeld, scanHoldLogs(logs))
	b.WriteString(text)
	if len(missing) > 0 {
		fmt.Fprintf(b, "acknowledged entries missing at a holding registrar's return (%d):\n    %s\n", len(missing), summarize(missing, 12))
	}
	return missing
}
