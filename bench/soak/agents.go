package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/registrar/client"
	"github.com/switchboard-mesh/switchboard/registry"
)

// agent writes its own keys through a registrar client on a seeded random schedule:
// register (a new revision), refresh (the identical endpoint again, as a TTL refresh
// does) and unregister, in batches of one to three keys. Which ops it makes is fixed
// by the seed; when they happen depends on the machine.
type agent struct {
	id   int
	c    *client.Client
	rng  *rand.Rand
	o    *oracle
	log  *slog.Logger
	keys []endpoint.Endpoint        // the key of each slot, fields otherwise unset
	cur  map[int]*endpoint.Endpoint // acknowledged state of each slot
	// ttl is every registration's TTL (0: none); a slot whose last acknowledged
	// register is older than ttl/4 is refreshed before anything else, as an agent's
	// keepalive would, so nothing acknowledged may expire.
	ttl      time.Duration
	lastSeen map[int]time.Time
	rev      int
	// gaveUp lists ops abandoned at the very end (reported: they make the oracle inexact).
	gaveUp []string
}

func newAgent(id, keys int, ttl time.Duration, seed uint64, c *client.Client, o *oracle, log *slog.Logger) *agent {
	a := &agent{id: id, c: c, o: o, log: log.With("agent", id), cur: map[int]*endpoint.Endpoint{}, ttl: ttl, lastSeen: map[int]time.Time{},
		rng: rand.New(rand.NewPCG(seed, 1000+uint64(id)))}
	for k := range keys {
		a.keys = append(a.keys, endpoint.Endpoint{
			Cluster: "east", Service: fmt.Sprintf("svc%d", k%4), Protocol: "http",
			Address: fmt.Sprintf("10.20.%d.%d", id, k+1), Port: 8080,
		})
	}
	return a
}

// due returns the keepalive refreshes due, at most n: the slots whose last
// acknowledged register is older than ttl/4.
func (a *agent) due(n int) []slotOp {
	if a.ttl <= 0 {
		return nil
	}
	var out []slotOp
	for slot, cur := range a.cur {
		if time.Since(a.lastSeen[slot]) > a.ttl/4 && len(out) < n {
			out = append(out, slotOp{slot, opRefresh, registry.Register(cur.Clone())})
		}
	}
	return out
}

type slotOp struct {
	slot int
	kind opKind
	op   registry.Op
}

// next picks the next batch: distinct slots, each with an op that fits its state;
// keepalive refreshes first. The random draws do not depend on timing, but which
// slots are due for a keepalive does: with a TTL, the op sequence is replayable only
// approximately.
func (a *agent) next() []slotOp {
	if due := a.due(3); len(due) > 0 {
		return due
	}
	n := 1 + a.rng.IntN(3)
	used := map[int]bool{}
	var out []slotOp
	for range n {
		// Most writes go to a quarter of the keys; the rest are written rarely, so their
		// last write stands through many faults and a lost one shows at the end.
		slot := a.rng.IntN(len(a.keys))
		if hot := max(1, len(a.keys)/4); a.rng.IntN(100) < 75 {
			slot = a.rng.IntN(hot)
		}
		if used[slot] {
			continue
		}
		used[slot] = true
		cur := a.cur[slot]
		p := a.rng.IntN(100)
		switch {
		case cur == nil || p < 30:
			a.rev++
			e := a.keys[slot]
			e.Node = "agent-" + strconv.Itoa(a.id)
			e.Priority = 1
			e.Weight = a.rng.IntN(1000)
			e.Annotations = map[string]string{"rev": strconv.Itoa(a.rev)}
			e.TTL = endpoint.TTL(a.ttl)
			out = append(out, slotOp{slot, opRegister, registry.Register(e)})
		case p < 70:
			out = append(out, slotOp{slot, opRefresh, registry.Register(cur.Clone())})
		default:
			out = append(out, slotOp{slot, opUnregister, registry.Unregister(cur.Clone())})
		}
	}
	return out
}

// run writes until stop ends, then finishes the batch in flight; a batch is retried
// until every op of it is acknowledged, or until hard ends (then it is reported).
// Then it calls wrote and keeps its entries alive until keep ends, as a live agent
// does: with TTLs of a few seconds, entries nobody refreshes would be gone before
// the final check ends.
func (a *agent) run(stop, hard, keep context.Context, wrote func()) {
	for stop.Err() == nil {
		a.apply(hard, a.next())
		select {
		case <-stop.Done():
		case <-time.After(time.Duration(10+a.rng.IntN(140)) * time.Millisecond):
		}
	}
	wrote()
	a.keepAlive(keep)
}

// keepAlive refreshes the entries due until ctx ends. A refresh that fails is due
// still, and tried again at the next tick; none is given up on, or reported.
func (a *agent) keepAlive(ctx context.Context) {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		batch := a.due(len(a.keys))
		if len(batch) == 0 {
			continue
		}
		ops := make([]registry.Op, len(batch))
		for i, s := range batch {
			ops[i] = s.op
		}
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := a.c.Apply(actx, ops)
		cancel()
		if err != nil {
			continue // all retried: a refresh is idempotent
		}
		for _, s := range batch {
			a.o.acked(a.id, s.kind, s.op, 1)
			a.lastSeen[s.slot] = time.Now()
		}
	}
}

func (a *agent) apply(hard context.Context, batch []slotOp) {
	backoff := 50 * time.Millisecond
	for tries := 1; len(batch) > 0; tries++ {
		ops := make([]registry.Op, len(batch))
		for i, s := range batch {
			ops[i] = s.op
		}
		ctx, cancel := context.WithTimeout(hard, 15*time.Second)
		err := a.c.Apply(ctx, ops)
		cancel()
		a.o.attempts.Add(1)
		var failed map[endpoint.Key]bool
		var ae *registry.ApplyError
		switch {
		case err == nil:
		case errors.As(err, &ae):
			failed = map[endpoint.Key]bool{}
			for _, k := range ae.Failed {
				failed[k] = true
			}
		default:
			failed = nil // every op is unknown
		}
		var retry []slotOp
		for _, s := range batch {
			if err != nil && (failed == nil || failed[s.op.Endpoint.Key()]) {
				retry = append(retry, s)
				continue
			}
			a.o.acked(a.id, s.kind, s.op, tries)
			if s.op.Kind == registry.OpRegister {
				e := s.op.Endpoint.Clone()
				a.cur[s.slot] = &e
				a.lastSeen[s.slot] = time.Now()
			} else {
				delete(a.cur, s.slot)
			}
		}
		if err == nil {
			return
		}
		a.o.failures.Add(1)
		if errors.Is(err, endpoint.ErrInvalid) {
			// The soak's own mistake, not a fault: retrying cannot help.
			a.log.Error("write refused as invalid", "err", err)
		} else {
			a.log.Debug("write failed, retrying", "err", err, "tries", tries)
		}
		batch = retry
		select {
		case <-hard.Done():
			for _, s := range batch {
				a.o.unacked.Add(1)
				a.gaveUp = append(a.gaveUp, fmt.Sprintf("agent %d: %s %s never acknowledged after %d tries: %v", a.id, s.kind, s.op.Endpoint.Key(), tries, err))
			}
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, time.Second)
	}
}

// watcher is a registrar client used only to Watch everything, keeping a map from
// the events. One of them gets stalled: its reader stops taking events for a while.
type watcher struct {
	id  int
	c   *client.Client
	log *slog.Logger

	mu         sync.Mutex
	m          map[endpoint.Key]endpoint.Endpoint
	synced     bool
	events     int
	rewatches  int
	stallUntil time.Time
	problems   []string // events that make no sense (a Removed of an unknown key…)
}

func newWatcher(id int, c *client.Client, log *slog.Logger) *watcher {
	return &watcher{id: id, c: c, log: log.With("watcher", id), m: map[endpoint.Key]endpoint.Endpoint{}}
}

func (w *watcher) stall(d time.Duration) {
	w.mu.Lock()
	w.stallUntil = time.Now().Add(d)
	w.mu.Unlock()
}

func (w *watcher) unstall() { w.stall(0) }

func (w *watcher) stalled() time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	return time.Until(w.stallUntil)
}

// run watches until ctx ends. A watch channel that closes early is opened again with
// a fresh map (the client sends the whole view again), and counted.
func (w *watcher) run(ctx context.Context) {
	for ctx.Err() == nil {
		ch, err := w.c.Watch(ctx, endpoint.Filter{})
		if err != nil {
			w.log.Warn("watch failed", "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
			continue
		}
		w.mu.Lock()
		w.m, w.synced = map[endpoint.Key]endpoint.Endpoint{}, false
		w.mu.Unlock()
		w.consume(ctx, ch)
		if ctx.Err() == nil {
			w.mu.Lock()
			w.rewatches++
			w.mu.Unlock()
			w.log.Warn("watch channel closed early; watching again")
		}
	}
}

func (w *watcher) consume(ctx context.Context, ch <-chan registry.Event) {
	for {
		if d := w.stalled(); d > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(min(d, 100*time.Millisecond)):
			}
			continue
		}
		var ev registry.Event
		var ok bool
		select {
		case <-ctx.Done():
			return
		case ev, ok = <-ch:
			if !ok {
				return
			}
		}
		w.mu.Lock()
		w.events++
		k := ev.Endpoint.Key()
		switch ev.Type {
		case registry.Synced:
			w.synced = true
		case registry.Added:
			if _, dup := w.m[k]; dup {
				w.problems = append(w.problems, "Added for a key already present: "+k.String())
			}
			w.m[k] = ev.Endpoint
		case registry.Updated:
			if _, ok := w.m[k]; !ok {
				w.problems = append(w.problems, "Updated for an unknown key: "+k.String())
			}
			w.m[k] = ev.Endpoint
		case registry.Removed:
			if _, ok := w.m[k]; !ok {
				w.problems = append(w.problems, "Removed for an unknown key: "+k.String())
			}
			delete(w.m, k)
		}
		w.mu.Unlock()
	}
}

func (w *watcher) view() (map[endpoint.Key]endpoint.Endpoint, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make(map[endpoint.Key]endpoint.Endpoint, len(w.m))
	for k, e := range w.m {
		out[k] = e
	}
	return out, w.synced
}
