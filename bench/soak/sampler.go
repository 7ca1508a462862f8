package main

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/registry"
)

// The final check sees only each key's last write, and an agent's keepalive (the
// identical re-register) repairs a lost registration within ttl/4 unless its
// registrar holds the entry (then the client keeps the refresh): a write that is
// lost and then repaired leaves no trace at the end. The sampler looks during the
// run. Whenever the registry lane has been quiet for quietNeeded (no registry fault
// active; the lane's "calm" entries make such windows), it lists the backend directly
// and compares with the oracle every key whose state last changed (refreshes change
// nothing) more than settle ago and that no write changed while it listed. A disagreement seen on two
// samples in a row for the same acknowledged write is a lost write. The margins are
// wide: a registrar persists within its batch interval (100 ms) when the backend is
// up, and after an outage its writer retries within 5 s (its backoff's cap) of an
// Apply that may itself take its 10 s timeout — hence 15 s of quiet.

const (
	settle      = 5 * time.Second
	quietNeeded = 15 * time.Second
)

// quiet tracks when registry faults are active, for the sampler.
type quiet struct {
	mu     sync.Mutex
	active int
	since  time.Time // last change to quiet
}

func (q *quiet) begin() {
	q.mu.Lock()
	q.active++
	q.mu.Unlock()
}

func (q *quiet) end() {
	q.mu.Lock()
	q.active--
	q.since = time.Now()
	q.mu.Unlock()
}

// quietFor reports how long no registry fault has been active (0 while one is).
func (q *quiet) quietFor() time.Duration {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.active > 0 {
		return 0
	}
	return time.Since(q.since)
}

type sampler struct {
	s       *system
	q       *quiet
	log     *slog.Logger
	samples int
	errors  int
	// suspects are last sample's disagreements, by key, with the ack they concern.
	suspects map[endpoint.Key]time.Time
	lost     []string // disagreements seen twice: acknowledged writes lost mid-run
	// resurrected are entries the oracle expects absent (their agent unregistered
	// them), seen twice: a removal undone (a replica's restore or a takeover).
	resurrected []string
	reported    map[endpoint.Key]time.Time
}

func (sm *sampler) run(stop context.Context) {
	sm.suspects, sm.reported = map[endpoint.Key]time.Time{}, map[endpoint.Key]time.Time{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	direct, err := sm.s.openDirect(ctx, time.Minute)
	if err != nil {
		sm.log.Warn("sampler: cannot open the backend; no mid-run samples", "err", err)
		return
	}
	defer direct.Close()
	t := time.NewTicker(2 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-stop.Done():
			return
		case <-t.C:
		}
		if sm.q.quietFor() < quietNeeded {
			sm.suspects = map[endpoint.Key]time.Time{} // a fault in between: start over
			continue
		}
		sm.sample(stop, direct)
	}
}

func (sm *sampler) sample(ctx context.Context, direct registry.Registry) {
	before := sm.s.oracle.changesAt()
	want := sm.s.oracle.snapshot()
	lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	eps, err := direct.List(lctx, endpoint.Filter{})
	cancel()
	if err != nil {
		sm.errors++
		return
	}
	after := sm.s.oracle.changesAt()
	sm.samples++
	got, _ := byKey(eps)
	now := time.Now()
	next := map[endpoint.Key]time.Time{}
	for _, m := range diff(want, got) {
		at, ok := before[m.key]
		if !ok || after[m.key] != at || now.Sub(at) < settle {
			continue // written meanwhile or recently: not settled
		}
		if r, ok := sm.reported[m.key]; ok && r.Equal(at) {
			continue // reported already
		}
		if prev, seen := sm.suspects[m.key]; seen && prev.Equal(at) {
			sm.reported[m.key] = at
			line := fmt.Sprintf("at +%s: %s — %s", now.Sub(sm.s.start).Round(time.Second), m.text, sm.s.oracle.describe(m.key, sm.s.start))
			if m.kind == unexpected {
				sm.resurrected = append(sm.resurrected, line)
				sm.log.Error("removed entry found again mid-run", "detail", line)
				continue
			}
			sm.lost = append(sm.lost, line)
			sm.log.Error("acknowledged write lost mid-run", "detail", line)
			continue
		}
		next[m.key] = at
	}
	sm.suspects = next
}
