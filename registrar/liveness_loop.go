package registrar

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/internal/backoff"
	"github.com/switchboard-mesh/switchboard/registrar/internal/view"
	"github.com/switchboard-mesh/switchboard/registry"
)

// holdFront is the backend, when this replica is to hold liveness on it.
func (r *Registrar) holdFront() *registry.Front {
	f, ok := r.cfg.Backend.(*registry.Front)
	if r.cfg.LivenessTTL <= 0 || !ok || !f.CanHold() {
		return nil
	}
	return f
}

// takeHold makes one attempt at this replica's hold on the backend. Run makes the
// first before it serves, so that a registrar that is up holds from its first write.
func (r *Registrar) takeHold(ctx context.Context, f *registry.Front) bool {
	id, err := f.Hold(ctx, r.cfg.LivenessTTL)
	if err != nil {
		r.log.Warn("taking a hold on the backend failed; agents refresh their entries meanwhile", "err", err)
		return false
	}
	r.live.setHold(id)
	r.log.Info("holding agents' entries by their sessions", "hold", id, "liveness_ttl", r.cfg.LivenessTTL)
	return true
}

// livenessLoop takes this replica's hold if Run could not, then every second removes
// the entries of sessions gone for their TTL and every fifth registers again the
// entries of live sessions the snapshot lost (liveness.go).
func (r *Registrar) livenessLoop(ctx context.Context) {
	f := r.holdFront()
	if f == nil {
		if r.cfg.LivenessTTL > 0 {
			r.log.Info("the backend cannot hold entries by a replica's liveness; agents keep theirs alive by refreshing them")
		}
		return
	}
	b := backoff.Backoff{Min: 100 * time.Millisecond, Max: 5 * time.Second}
	for !r.live.holding() {
		if !b.Wait(ctx) {
			return
		}
		r.takeHold(ctx, f)
	}
	t := time.NewTicker(time.Second)
	defer t.Stop()
	var retry []registry.Op
	for n := 1; ; n++ {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		retry = r.expire(ctx, append(retry, r.live.expired(time.Now())...))
		if n%restoreEvery == 0 {
			r.restore(f.HoldRefresh())
		}
	}
}

// expire removes the entries of sessions gone for their TTL, each only while it is
// still under this replica's hold. The backend's change feed tells the snapshot. It
// returns the removals to try again.
func (r *Registrar) expire(ctx context.Context, ops []registry.Op) []registry.Op {
	// A removal waiting for a retry is dropped if the entry is held again since.
	if ops = r.live.notHeld(ops); len(ops) == 0 {
		return nil
	}
	actx, cancel := context.WithTimeout(ctx, r.cfg.BackendTimeout)
	defer cancel()
	if err := r.cfg.Backend.Apply(actx, ops); err != nil {
		r.log.Warn("removing entries of agents gone failed; will retry", "entries", len(ops), "err", err)
		return ops
	}
	r.m.livenessExpired.Add(float64(len(ops)))
	r.log.Info("removed entries of agents whose session ended", "entries", len(ops))
	return nil
}

// restoreEvery is how many of the loop's seconds pass between two restores.
const restoreEvery = 5

// restore registers again, under the hold, the entries of live sessions that the
// snapshot no longer shows as they were registered: the backend lost them (the
// hold ran out in a partition) or another writer removed or changed them, which an
// agent's next refresh would have undone before liveness was held. On a backend
// whose held entries also expire on their own it writes again those due (refresh).
func (r *Registrar) restore(refresh time.Duration) {
	held := r.live.live()
	if len(held) == 0 {
		return
	}
	now := time.Now()
	before, limit := refreshDue(refresh, len(held), now)
	var missing, due []registry.Op
	r.view.Read(func(rd view.Reader) {
		missing, due = pick(held, func(e endpoint.Endpoint) bool {
			cur, ok := rd.Lookup(e.Key())
			return !ok || !endpoint.Equal(cur, e)
		}, before, limit)
	})
	if len(missing)+len(due) == 0 {
		return
	}
	written := append(missing, due...)
	if _, err := r.view.Accept(written, nil, nil); err != nil {
		r.log.Warn("registering again entries of live sessions failed; will retry", "entries", len(missing), "refreshed", len(due), "err", err)
		return
	}
	r.live.wrote(written, now.Unix())
	r.m.livenessRefreshed.Add(float64(len(due)))
	if len(missing) > 0 {
		r.m.livenessRestored.Add(float64(len(missing)))
		r.log.Info("registered again entries of live sessions the registry lost", "entries", len(missing))
	}
}

// pick sorts held into the entries the snapshot lost (missing: lost reports it) and,
// of the others, at most limit last written before the Unix second before (due).
func pick(held []heldOp, lost func(endpoint.Endpoint) bool, before int64, limit int) (missing, due []registry.Op) {
	for _, h := range held {
		switch {
		case lost(h.op.Endpoint):
			missing = append(missing, h.op)
		case h.written < before && len(due) < limit:
			due = append(due, h.op)
		}
	}
	return missing, due
}

// refreshDue returns pick's bounds for a backend whose held entries must be
// written again once per refresh (0: never), with n entries held: those written
// more than three quarters of refresh ago (less one pass, so that a short refresh
// is kept too), as many a restore as spreads all n over a quarter of refresh.
// Entries written at once (a replica's start) come due at once and are then
// written over that quarter, each within refresh: each entry about once per 3/4
// refresh, and never more than 4n per refresh in a second.
func refreshDue(refresh time.Duration, n int, now time.Time) (before int64, limit int) {
	if refresh <= 0 {
		return 0, 0
	}
	quarter := refresh / 4
	limit = int((int64(n)*int64(restoreEvery*time.Second) + int64(quarter) - 1) / int64(quarter))
	return now.Add(-3*quarter + restoreEvery*time.Second).Unix(), limit
}

// livenessMetrics are the series of held entries.
func (r *Registrar) livenessMetrics(reg prometheus.Registerer) {
	if reg == nil {
		return
	}
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "registrar_held_entries", Help: "Entries this replica keeps alive for agents' sessions, written once instead of at every refresh.",
		}, func() float64 { n, _ := r.live.count(); return float64(n) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "registrar_held_sessions", Help: "Agent sessions with entries held by this replica, or a stream open to it.",
		}, func() float64 { _, n := r.live.count(); return float64(n) }),
		r.m.livenessExpired, r.m.livenessRestored, r.m.livenessRefreshed,
	)
}
