package registrar

import (
	"context"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	registrarv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/registrar/v1"
	"github.com/switchboard-mesh/switchboard/registrar/token"
)

// watcher is one agent's stream. Watchers share the history ring and keep only a
// cursor (the next sequence to send), so an idle watcher costs a few words, one
// event is encoded once for all of them, and a slow one holds up nobody: when its
// cursor falls out of the ring it is resynced with a full snapshot.
type watcher struct {
	id      uint64
	node    string
	cluster string
	peer    string
	send    func(encoded) error
	scope
	// rescope delivers a scoped stream's new sets of services; nil when the stream
	// cannot change its set.
	rescope <-chan scope
}

// scope is the set of services a watcher receives: nil services means all of them.
// id is the client's name for the set, echoed when a snapshot of it is complete.
type scope struct {
	services map[string]struct{}
	id       uint64
}

func (w *watcher) wants(ev ringEvent) bool {
	if w.services == nil || ev.service == "" {
		return true
	}
	_, ok := w.services[ev.service]
	return ok
}

// progress tracks, for a scoped watcher, the latest event it was not sent. Once the
// watcher has caught up, it gets that event's version and frontier as a PROGRESS
// (at most one per interval), so its resume token and persisted frontier move on
// although the changes were of other services.
type progress struct {
	skipped  ringEvent // seq 0: nothing to report
	last     time.Time
	interval time.Duration
	timer    *time.Timer
}

// due reports whether to send the PROGRESS now; if not, wait returns the channel
// that fires when it will be (nil when nothing is pending).
func (p *progress) due() (bool, <-chan time.Time) {
	if p.skipped.seq == 0 {
		return false, nil // the common case, on every watcher's every wake: no clock read
	}
	left := p.interval - time.Since(p.last)
	if left <= 0 {
		return true, nil
	}
	if p.timer == nil {
		p.timer = time.NewTimer(left)
	} else {
		p.timer.Reset(left)
	}
	return false, p.timer.C
}

func (p *progress) stop() {
	if p.timer != nil {
		p.timer.Stop()
	}
}

// serve streams to w until ctx ends or the registrar shuts down. lastVersion is the
// agent's last_version.
func (r *Registrar) serve(ctx context.Context, w *watcher, lastVersion string) error {
	s := r.s
	full, next, completeAt, resumed := r.start(lastVersion)
	pr := progress{interval: r.cfg.ProgressInterval}
	defer pr.stop()
	// No logger With the watcher's attributes: it would live as long as the stream.
	r.log.Debug("watch started", "watcher", w.id, "node", w.node, "peer", w.peer, "last_version", lastVersion, "resumed", resumed)
	for {
		if full {
			at, err := r.sendSnapshot(w)
			if err != nil {
				return err
			}
			full, resumed, next = false, false, at+1
			continue
		}
		if resumed && next > completeAt {
			s.mu.RLock()
			done := encodeComplete(token.Version{Epoch: s.epoch, Seq: completeAt}, true, min(s.persisted(), completeAt), w.scope.id)
			s.mu.RUnlock()
			if err := w.send(done); err != nil {
				return err
			}
			r.m.broadcast[registrarv1.EndpointEvent_SNAPSHOT_COMPLETE].Inc()
			resumed = false
		}
		s.mu.RLock()
		wake := s.wake
		ev, ok := s.eventAt(next)
		behind := !ok && next <= s.seq
		s.mu.RUnlock()
		switch {
		case ok && !w.wants(ev):
			pr.skipped = ev
			next++
		case ok:
			if err := w.send(ev.raw); err != nil {
				return err
			}
			r.m.broadcast[ev.typ].Inc()
			pr.skipped = ringEvent{}
			next++
		case behind:
			r.log.Info("watcher fell behind the history ring; resyncing with a full snapshot",
				"watcher", w.id, "node", w.node, "peer", w.peer, "next", next)
			r.m.resyncs.Inc()
			full = true
		default:
			now, timer := pr.due()
			if now {
				ev := pr.skipped
				if err := w.send(encodeProgress(token.Version{Epoch: s.epoch, Seq: ev.seq}, ev.persisted)); err != nil {
					return err
				}
				r.m.broadcast[registrarv1.EndpointEvent_PROGRESS].Inc()
				pr.skipped, pr.last = ringEvent{}, time.Now()
				continue
			}
			select {
			case <-wake:
			case <-timer:
			case sc := <-w.rescope:
				// A new set: a snapshot of it replaces what the client holds.
				w.scope, full, resumed = sc, true, false
				pr.skipped = ringEvent{}
			case <-ctx.Done():
				if st, ok := status.FromError(context.Cause(ctx)); ok {
					return st.Err() // the stream's request reader ended it
				}
				return status.FromContextError(ctx.Err()).Err()
			case <-s.closing:
				return status.Error(codes.Unavailable, "registrar shutting down; reconnect to another replica")
			}
		}
	}
}

// start decides how a stream begins: with a full snapshot, or by replaying the ring
// from the token on (nothing, when the token is current).
func (r *Registrar) start(lastVersion string) (full bool, next, completeAt uint64, resumed bool) {
	v, err := token.Parse(lastVersion)
	r.s.mu.RLock()
	defer r.s.mu.RUnlock()
	if lastVersion == "" || err != nil || v.Epoch != r.s.epoch || !r.s.canResume(v.Seq) {
		if lastVersion != "" {
			r.log.Debug("resume token not usable here; sending a full snapshot", "last_version", lastVersion, "err", err)
		}
		return true, 0, 0, false
	}
	return false, v.Seq + 1, r.s.seq, true
}

// sendSnapshot sends the full state, then SNAPSHOT_COMPLETE, and returns the
// version the snapshot was taken at.
func (r *Registrar) sendSnapshot(w *watcher) (uint64, error) {
	var snap *snapshot
	if w.services == nil {
		snap = r.s.snapshot()
	} else {
		snap = r.s.scopedSnapshot(w.services)
	}
	for _, c := range snap.chunks {
		if err := w.send(c); err != nil {
			return 0, err
		}
	}
	r.s.mu.RLock()
	persisted := min(r.s.persisted(), snap.at.Seq)
	r.s.mu.RUnlock()
	if err := w.send(encodeComplete(snap.at, false, persisted, w.scope.id)); err != nil {
		return 0, err
	}
	r.m.broadcast[registrarv1.EndpointEvent_FULL_SNAPSHOT].Add(float64(snap.count))
	r.m.broadcast[registrarv1.EndpointEvent_SNAPSHOT_COMPLETE].Inc()
	return snap.at.Seq, nil
}
