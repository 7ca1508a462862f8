package jetstream

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchboard-mesh/switchboard/internal/backoff"
	"github.com/switchboard-mesh/switchboard/registry"
)

// The reaper removes the entries of holds whose liveness ended. Nothing in the
// server removes them: they have no Nats-TTL, so that a live hold costs no write per
// entry, and only MaxAge would. Every driver that holds runs one, so that entries go
// within their hold's ttl (and a reap) as long as one holding driver lives on the
// stream.
//
// It follows the liveness subjects (headers only) and reaps when one's delete
// marker arrives (its liveness message expired), once when it starts, and again each
// time it has to reopen its feed (markers may have come and gone meanwhile). A reap
// reads which holds are live, then every entry naming a hold that is not (the
// stream's headers, then the payloads of those entries only), confirms
// with the stream leader that each such hold's liveness is gone (it may have been
// made after the first read), and removes each of its entries only if the entry is
// still the one read (Nats-Expected-Last-Subject-Sequence): an entry another hold
// took over, or another reaper removed, is left. Entries without an owner are
// never touched.

// reapWindow bounds a reap's removals awaiting an ack.
const reapWindow = 256

// startReaper starts the driver's reaper, once; it runs until Close.
func (r *driver) startReaper() {
	r.reaperOnce.Do(func() {
		r.tasks.Add(1)
		go r.runReaper(r.life)
	})
}

func (r *driver) runReaper(ctx context.Context) {
	defer r.tasks.Done()
	retry := backoff.Backoff{Min: minBackoff, Max: maxBackoff}
	for {
		start := time.Now()
		err := r.reapSession(ctx)
		if ctx.Err() != nil || r.nc.IsClosed() {
			return
		}
		if time.Since(start) > 2*maxBackoff {
			retry.Reset()
		}
		r.log.Warn("hold reaper interrupted; reading again", "error", err)
		if !retry.Wait(ctx) {
			return
		}
	}
}

// reapSession follows the liveness subjects through one feed, reaping once at the
// start and whenever a liveness message expires, until the feed fails, the
// connection comes back from a disconnect, or the driver closes.
func (r *driver) reapSession(ctx context.Context) error {
	reconnected := r.nc.StatusChanged(nats.CONNECTED)
	defer r.nc.RemoveStatusListener(reconnected)
	fd, err := r.openFeed(ctx, []string{r.subj.livenessAll()}, true)
	if err != nil {
		return fmt.Errorf("follow liveness subjects: %w", err)
	}
	defer fd.stop(ctx)
	kick := make(chan struct{}, 1)
	poke := func() {
		select {
		case kick <- struct{}{}:
		default: // a reap is already due; it will see this one too
		}
	}
	poke()
	_ = fd.start(func(_ string, _ uint64, _ int64, h nats.Header, _ []byte, _ uint64) error {
		if isRemoval(h) {
			poke()
		}
		return nil
	})
	for {
		select {
		case err := <-fd.Err():
			return err
		case _, ok := <-reconnected:
			if ok {
				return errReconnected
			}
			return ctx.Err()
		case <-ctx.Done():
			return ctx.Err()
		case <-kick:
			if err := r.reap(ctx); err != nil {
				return err
			}
		}
	}
}

// reapable is an entry read by a reap whose hold did not look live.
type reapable struct {
	subject string
	seq     uint64
	h       nats.Header
	data    []byte
}

// reap removes the entries of every hold whose liveness is gone. Most reaps find
// nothing (a replica that stopped after its entries were taken over, a reaper that
// starts), so the stream is first read without payloads, and read again with them
// only when there is something to remove, whose key a removal names.
func (r *driver) reap(ctx context.Context) error {
	live, err := r.liveHolds(ctx)
	if err != nil {
		return fmt.Errorf("read liveness subjects: %w", err)
	}
	found, err := r.orphans(ctx, live, true, nil)
	if err != nil || len(found) == 0 {
		return err
	}
	subjects := map[string]bool{}
	for _, entries := range found {
		for _, e := range entries {
			subjects[e.subject] = true
		}
	}
	if found, err = r.orphans(ctx, live, false, subjects); err != nil {
		return err
	}
	for owner, entries := range found {
		if err := r.reapHold(ctx, owner, entries); err != nil {
			return err
		}
	}
	return nil
}

// orphans reads the live entries whose owner is not among live, by owner; with
// only set, those on its subjects.
func (r *driver) orphans(ctx context.Context, live map[registry.HoldID]bool, headersOnly bool, only map[string]bool) (map[registry.HoldID][]reapable, error) {
	byOwner := map[registry.HoldID][]reapable{}
	err := r.readFeed(ctx, []string{r.subj.All()}, headersOnly, func(subject string, seq uint64, h nats.Header, data []byte) {
		owner, ok := ownerOf(h)
		if !ok || live[owner] || isRemoval(h) || (only != nil && !only[subject]) || !r.subj.entryShaped(subject) {
			return
		}
		byOwner[owner] = append(byOwner[owner], reapable{subject, seq, h, data})
	}, nil)
	if err != nil {
		return nil, fmt.Errorf("read held entries: %w", err)
	}
	return byOwner, nil
}

// liveHolds reads which holds have a live liveness message.
func (r *driver) liveHolds(ctx context.Context) (map[registry.HoldID]bool, error) {
	live := map[registry.HoldID]bool{}
	err := r.readFeed(ctx, []string{r.subj.livenessAll()}, true, func(subject string, _ uint64, h nats.Header, _ []byte) {
		if id, ok := r.subj.holdOf(subject); ok && !isRemoval(h) {
			live[id] = true
		}
	}, nil)
	return live, err
}

// reapHold removes entries of owner, once the stream leader confirms that its
// liveness is gone: a hold made after liveHolds read has entries too.
func (r *driver) reapHold(ctx context.Context, owner registry.HoldID, entries []reapable) error {
	m, err := r.lastMsg(ctx, r.subj.liveness(owner))
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
	case err != nil:
		return fmt.Errorf("read liveness of hold %s: %w", owner, err)
	case !isRemoval(m.header):
		return nil // live after all
	}
	removed, left := 0, 0
	for start := 0; start < len(entries); start += reapWindow {
		n, err := r.removeHeld(ctx, entries[start:min(start+reapWindow, len(entries))])
		removed += n
		left += min(reapWindow, len(entries)-start) - n
		if err != nil {
			return err
		}
	}
	if removed > 0 {
		r.reaped.Add(uint64(removed))
		if r.reapedCount != nil {
			r.reapedCount.Add(float64(removed))
		}
	}
	r.log.Info("reaped the entries of a hold whose liveness ended", "hold", owner, "removed", removed, "left", left)
	return nil
}

// removeHeld publishes the removal of each entry, expecting its subject to hold
// what was read, and returns how many were removed. A removal refused because the
// subject changed leaves the entry; any other failure ends the reap, to be tried
// again.
func (r *driver) removeHeld(ctx context.Context, entries []reapable) (int, error) {
	futures := make([]jetstream.PubAckFuture, 0, len(entries))
	h := headers{r: r}
	for _, e := range entries {
		ep, err := decodeJSON(e.data, nil)
		if err != nil {
			// Its writer wrote what no reader uses; its removal would name no key.
			r.log.Debug("reaper leaves an undecodable held entry", "subject", e.subject, "error", err)
			continue
		}
		p := r.sizeRemoval(e.h, e.seq)
		m := &nats.Msg{Subject: e.subject, Header: h.removal(&p), Data: appendJSON(nil, ep.Key().Endpoint())}
		f, err := r.js.PublishMsgAsync(m)
		if err != nil {
			return 0, err
		}
		futures = append(futures, f)
	}
	timeout := time.NewTimer(ackTimeout)
	defer timeout.Stop()
	removed := 0
	for _, f := range futures {
		select {
		case a := <-f.Ok():
			r.noteWritten(a.Sequence)
			removed++
		case err := <-f.Err():
			if !isWrongLastSeq(err) {
				return removed, err
			}
		case <-timeout.C:
			return removed, jetstream.ErrAsyncPublishTimeout
		case <-ctx.Done():
			return removed, ctx.Err()
		}
	}
	return removed, nil
}

// Reaped is how many held entries this registry's reaper removed because their
// hold's liveness ended. Reach it through the Front's Driver, as an
// interface{ Reaped() uint64 }; Options.Reaped counts them as a metric.
func (r *driver) Reaped() uint64 { return r.reaped.Load() }
