package main

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/switchboard-mesh/switchboard/bench/internal/promtext"
	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/registry"
)

// Re-homing: with --liveness-ttl each registrar holds its agents' entries under one
// hold on the backend, and the agents' refreshes stay in their clients. A registrar
// killed while it holds entries takes its hold with it; the entries live on only if
// their agents re-home to a surviving replica, which takes them over by registering
// them under its own hold. The kill-holding-registrar fault keeps its victim down
// until its hold has run out; this file counts what the survivors took over (from
// every registrar's registrar_held_entries, read twice a second) and checks, as the
// victim returns, that no acknowledged entry went with its hold.

// heldMetric is the registrar's gauge of the entries it holds for agents' sessions.
const heldMetric = "registrar_held_entries"

// heldWatch reads each registrar's held entries and keeps the account of the kills.
type heldWatch struct {
	urls   []string
	client *http.Client
	log    *slog.Logger

	mu      sync.Mutex
	held    []int             // the last value read of each replica; -1: none yet
	open    map[int]*takeover // kills in progress, by victim
	done    []takeover        // kills healed, in order
	maxHeld int               // the most entries one replica was seen holding
}

// takeover is one registrar kill with survivors: what the victim held when it died,
// and how far the survivors' held entries rose while it was down.
type takeover struct {
	kind       faultKind
	victim     int
	at         time.Duration // from the soak's start
	victimHeld int           // its last value read before the kill
	before     int           // the survivors' held entries then
	peak       int           // the survivors' most while it was down
	// checked and missing are the settled acknowledged entries compared with the
	// backend as the victim returned (kill-holding-registrar only; checked -1: not
	// compared), and those of them the backend lacked.
	checked int
	missing []string
}

// takenOver is how many of the victim's entries the survivors took over: their rise
// while it was down, at most what it held (agents' own new writes make the rest).
func (t takeover) takenOver() int {
	return max(0, min(t.peak-t.before, t.victimHeld))
}

func newHeldWatch(urls []string, log *slog.Logger) *heldWatch {
	h := &heldWatch{urls: urls, client: &http.Client{Timeout: 400 * time.Millisecond}, log: log,
		held: make([]int, len(urls)), open: map[int]*takeover{}}
	for i := range h.held {
		h.held[i] = -1
	}
	return h
}

// run reads every registrar's held entries twice a second until ctx ends.
func (h *heldWatch) run(ctx context.Context) {
	t := time.NewTicker(500 * time.Millisecond)
	defer t.Stop()
	for {
		for i, u := range h.urls {
			if n, err := h.read(ctx, u); err == nil {
				h.observe(i, n)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (h *heldWatch) read(ctx context.Context, url string) (int, error) {
	v, err := promtext.Fetch(ctx, h.client, url, heldMetric)
	return int(v), err
}

// observe records replica i's held entries, and the survivors' sum for every kill
// in progress.
func (h *heldWatch) observe(i, n int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.held[i] = n
	h.maxHeld = max(h.maxHeld, n)
	for _, t := range h.open {
		t.peak = max(t.peak, h.survivorsLocked(t.victim))
	}
}

func (h *heldWatch) survivorsLocked(victim int) int {
	sum := 0
	for i, n := range h.held {
		if i != victim && n > 0 {
			sum += n
		}
	}
	return sum
}

// entries is replica i's held entries as last read (0 if never).
func (h *heldWatch) entries(i int) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return max(0, h.held[i])
}

// most is the replica holding the most entries as last read; fallback when none
// holds any (a backend without holds).
func (h *heldWatch) most(fallback int) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	best := fallback
	for i, n := range h.held {
		if n > h.held[best] {
			best = i
		}
	}
	return best
}

// killing opens the account of a kill of one registrar while others live; a kill
// of every registrar (nobody to take over) opens nothing. A victim's last value is
// forgotten: it holds nothing any more, and what it held must not count as a
// survivor's in the next kill's account.
func (h *heldWatch) killing(f fault, at time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch f.kind {
	case killRegistrar, killBoth, killHolding:
	case killAllRegistrars:
		for i := range h.held {
			h.held[i] = -1
		}
		return
	default:
		return
	}
	v := f.targets[0]
	before := h.survivorsLocked(v)
	h.open[v] = &takeover{kind: f.kind, victim: v, at: at, victimHeld: max(0, h.held[v]), before: before, peak: before, checked: -1}
	h.held[v] = -1
}

// healed closes the account of the kill of victim, with the check made at its
// return, and logs it.
func (h *heldWatch) healed(victim, checked int, missing []string) {
	h.mu.Lock()
	t := h.open[victim]
	delete(h.open, victim)
	if t != nil {
		t.checked, t.missing = checked, missing
		h.done = append(h.done, *t)
	}
	h.mu.Unlock()
	if t != nil {
		h.log.Info("registrar back", "kind", t.kind, "victim", victim, "held_at_kill", t.victimHeld,
			"taken_over", t.takenOver(), "checked", checked, "missing", len(missing))
	}
}

// account is every healed kill's record.
func (h *heldWatch) account() ([]takeover, int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]takeover(nil), h.done...), h.maxHeld
}

// rehomed is called as a registrar kill heals, before the victim restarts: it
// closes the kill's account, and after a kill-holding-registrar, whose victim's
// hold has run out by now, compares the settled acknowledged entries with the
// backend: an entry missing went with the dead hold, nobody having taken it over.
func (s *system) rehomed(f fault) {
	switch f.kind {
	case killRegistrar, killBoth, killHolding:
	default:
		return
	}
	checked, missing := -1, []string(nil)
	if f.kind == killHolding && s.net == nil {
		checked, missing = s.missingNow()
	}
	s.held.healed(f.targets[0], checked, missing)
}

// missingNow lists the backend and returns how many settled acknowledged entries it
// compared and which of them it lacks or holds stale; -1 if it could not list.
func (s *system) missingNow() (int, []string) {
	direct := s.directReader()
	if direct == nil {
		return -1, nil
	}
	before := s.oracle.changesAt()
	want := s.oracle.snapshot()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	eps, err := direct.List(ctx, endpoint.Filter{})
	cancel()
	if err != nil {
		s.log.Warn("listing the backend at a registrar's return failed", "err", err)
		return -1, nil
	}
	after := s.oracle.changesAt()
	got, _ := byKey(eps)
	now := time.Now()
	settled := map[endpoint.Key]endpoint.Endpoint{}
	for k, e := range want {
		if at := before[k]; after[k].Equal(at) && now.Sub(at) >= settle {
			settled[k] = e
		}
	}
	var missing []string
	for _, m := range diff(settled, got) {
		if m.kind != unexpected {
			missing = append(missing, m.text+" — "+s.oracle.describe(m.key, s.start))
		}
	}
	return len(settled), missing
}

// directReader is the backend opened directly, once, for the checks at returns.
func (s *system) directReader() registry.Registry {
	s.directOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		r, err := s.openDirect(ctx, 20*time.Second)
		if err != nil {
			s.log.Warn("cannot open the backend for the checks at registrars' returns", "err", err)
			return
		}
		s.direct = r
		s.closers = append(s.closers, func() { r.Close() })
	})
	return s.direct
}

// resolve fixes what a fault's plan leaves to the moment it strikes: the victim of
// a kill-holding-registrar is the replica holding the most entries then.
func (s *system) resolve(f fault) fault {
	if f.kind == killHolding {
		f.targets = []int{s.held.most(f.targets[0])}
	}
	return f
}

// Lines of the registrars' logs (registrar/liveness_loop.go, registry/etcd/hold.go)
// that tell what their holds did.
const (
	holdTakenLog = "holding agents' entries by their sessions"
	cannotHold   = "the backend cannot hold entries by a replica's liveness"
	holdLostLog  = "hold lease lost"
	restoredLog  = "registered again entries of live sessions the registry lost"
	expiredLog   = "removed entries of agents whose session ended"
)

// holdLogs is what the registrars' logs say of their holds: starts that took one,
// starts that found the backend cannot hold, holds the backend dropped (renewed
// under the same ID), and the entries restored and removed by the liveness loop.
type holdLogs struct {
	taken, refused, dropped int
	restored, expired       int
}

// scanHoldLogs reads the registrars' logs.
func scanHoldLogs(logs []string) holdLogs {
	var h holdLogs
	for _, name := range logs {
		f, err := os.Open(name)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			h.add(sc.Text())
		}
		_ = f.Close()
	}
	return h
}

func (h *holdLogs) add(l string) {
	switch {
	case strings.Contains(l, holdTakenLog):
		h.taken++
	case strings.Contains(l, cannotHold):
		h.refused++
	case strings.Contains(l, holdLostLog):
		h.dropped++
	case strings.Contains(l, restoredLog):
		h.restored += entriesOf(l)
	case strings.Contains(l, expiredLog):
		h.expired += entriesOf(l)
	}
}

// entriesOf is the value of a log line's entries=N.
func entriesOf(l string) int {
	_, v, ok := strings.Cut(l, " entries=")
	if !ok {
		return 0
	}
	v, _, _ = strings.Cut(v, " ")
	n, _ := strconv.Atoi(v)
	return n
}

// rehomeReport is the report's account of re-homing, and whether the run shows
// the path exercised: a holding registrar killed, and entries taken over.
func rehomeReport(livenessTTL time.Duration, ts []takeover, maxHeld int, hl holdLogs) (string, []string) {
	var b strings.Builder
	if livenessTTL <= 0 {
		return "re-homing: liveness off (--liveness-ttl=0): the registrars hold nothing; entries live by their TTL\n", nil
	}
	fmt.Fprintf(&b, "re-homing (--liveness-ttl %s): registrar starts that took a hold: %d; that found the backend cannot hold: %d; most entries one replica held: %d\n",
		livenessTTL, hl.taken, hl.refused, maxHeld)
	fmt.Fprintf(&b, "  the registrars' logs: holds the backend dropped and renewed: %d; entries of live sessions registered again: %d; entries of ended sessions removed: %d\n",
		hl.dropped, hl.restored, hl.expired)
	var holding, total, kills, checked int
	var missing []string
	for _, t := range ts {
		check := "not compared"
		if t.checked >= 0 {
			check = fmt.Sprintf("%d settled entries compared, %d missing", t.checked, len(t.missing))
			checked++
			missing = append(missing, t.missing...)
		}
		fmt.Fprintf(&b, "  +%-8s %-22s registrar-%d held %d; survivors held %d → up to %d: %d taken over; at its return: %s\n",
			t.at.Round(time.Second), t.kind, t.victim, t.victimHeld, t.before, t.peak, t.takenOver(), check)
		if t.kind == killHolding {
			kills++
			if t.victimHeld > 0 {
				holding++
			}
		}
		total += t.takenOver()
	}
	fmt.Fprintf(&b, "entries taken over: %d, over %d registrar kills (%d of them %s, %d with entries held at the kill, %d checked at the return)\n",
		total, len(ts), kills, killHolding, holding, checked)
	switch {
	case hl.taken == 0:
		fmt.Fprintf(&b, "re-homing NOT exercised: no registrar took a hold (their logs say the backend cannot hold %d times); agents kept their entries alive by refreshing them\n", hl.refused)
	case holding == 0 || total == 0:
		fmt.Fprintf(&b, "re-homing NOT exercised: %d kills of a registrar holding entries, %d entries taken over\n", holding, total)
	default:
		fmt.Fprintf(&b, "re-homing exercised: %d kills of a registrar holding entries, %d entries taken over\n", holding, total)
	}
	return b.String(), missing
}
