package jetstream

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/internal/backoff"
	"github.com/switchboard-mesh/switchboard/registry"
)

const (
	minBackoff = 100 * time.Millisecond
	maxBackoff = 5 * time.Second
	// drainCheck is how often a read whose snapshot has not ended asks its consumer
	// whether anything is still pending (feed.ifDrained).
	drainCheck = 500 * time.Millisecond
	// rescanTimeout bounds one rescan's read.
	rescanTimeout = 30 * time.Second
)

var errReconnected = errors.New("connection re-established")

// Watch streams changes to the entries matching f: every live entry as Added, then
// Synced, then Added/Updated/Removed as they happen. Removals include expiries (the
// server's delete markers), Unregister, and removals that leave no marker (another
// writer's purge), which a periodic re-read finds (Options.WatchRescan).
//
// Each session reads the stream through a fresh feed. When a session breaks — a
// skipped delivery, a reconnect, missed heartbeats — the next one re-reads the
// whole state and hands it to the registry.Front as a re-read (registry.Reread),
// which sends the watcher only the differences: it never misses a removal whose
// marker expired while it was away, nor sees an unchanged entry flap.
func (r *driver) Watch(ctx context.Context, f endpoint.Filter) (<-chan registry.Event, error) {
	w := &watch{r: r, filters: r.subj.consumerFilters(f), keep: r.subj.AddressCheck(f),
		out: make(chan registry.Event, 1024), known: map[string]watchEntry{}, byKey: map[endpoint.Key][]string{},
		dec: r.decoder(), maxAge: r.maxAge}
	// The first feed is opened here so an unreachable stream fails the call; later
	// sessions retry until the watch ends.
	before := r.nc.LastError()
	fd, err := r.openFeed(ctx, w.filters, false)
	if err != nil {
		return nil, unavailable(deniedSince(r.nc, before, fmt.Errorf("watch %s: %w", r.cfg.Name, err)))
	}
	go w.run(ctx, fd)
	return w.out, nil
}

type watch struct {
	r       *driver
	filters []string
	// keep, when not nil, tells which subjects the filter selects: those whose
	// address token spells its IPv6 address (Subjects.AddressCheck). The feed
	// delivers the others too; they are skipped undecoded.
	keep func(subject string) bool
	out  chan registry.Event
	// known holds the live entries the session read, by subject, and byKey their
	// subjects by key: usually one, but another writer or an earlier version may
	// have put the same key on another subject (Subjects.Forms). The watcher has
	// been told, for each key, its entry with the highest sequence. Only the
	// goroutine holding the current feed's lock touches them.
	known  map[string]watchEntry
	byKey  map[endpoint.Key][]string
	dec    *decoder
	reread bool          // a session has begun: the next one is a re-read
	maxAge time.Duration // the stream's (driver.maxAge)
}

type watchEntry struct {
	ep  endpoint.Endpoint
	seq uint64
	written
}

// written is when an entry's message was written (its stream timestamp) and when
// it expires (expiresAt), Unix nanoseconds; 0 if unknown or never.
type written struct{ tm, expires int64 }

func (w *watch) run(ctx context.Context, fd *feed) {
	defer close(w.out)
	// Full jitter keeps many watchers from resyncing in lockstep.
	retry := backoff.Backoff{Min: minBackoff, Max: maxBackoff}
	for {
		start := time.Now()
		err := w.session(ctx, fd)
		if ctx.Err() != nil || w.r.nc.IsClosed() {
			return
		}
		// A session that ran a while was healthy: back off afresh.
		if time.Since(start) > 2*maxBackoff {
			retry.Reset()
		}
		w.r.log.Warn("watch interrupted, re-reading state", "filter", w.filters, "error", err)
		for fd = nil; fd == nil; {
			if !retry.Wait(ctx) {
				return
			}
			if fd, err = w.r.openFeed(ctx, w.filters, false); err != nil {
				w.r.log.Warn("watch cannot create consumer", "filter", w.filters, "error", err)
				if w.r.nc.IsClosed() {
					return
				}
			}
		}
	}
}

// session reads one feed until it fails, the connection comes back from a
// disconnect (deliveries may have been lost with it), or the watch ends.
func (w *watch) session(ctx context.Context, fd *feed) error {
	sctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	reconnected := w.r.nc.StatusChanged(nats.CONNECTED)
	defer w.r.nc.RemoveStatusListener(reconnected)
	// The handler may block sending to the watcher: cancel sctx before stopping the
	// feed, which waits for the handler.
	defer fd.stop(ctx)
	defer cancel(nil)

	if err := w.begin(sctx); err != nil {
		return err
	}
	// Whether the session's snapshot is done. Guarded by fd.mu once the feed has
	// started.
	snapshotted := false
	endSnapshot := func() error {
		if snapshotted {
			return nil
		}
		snapshotted = true
		return w.send(sctx, registry.Synced, endpoint.Endpoint{})
	}
	if fd.pending == 0 {
		if err := endSnapshot(); err != nil {
			return err
		}
	}
	err := fd.start(func(subject string, seq uint64, tm int64, h nats.Header, data []byte, pending uint64) error {
		if w.keep == nil || w.keep(subject) {
			if err := w.handle(sctx, w.dec.decode(subject, seq, h, data), tm, h); err != nil {
				return err
			}
		}
		if pending == 0 {
			return endSnapshot()
		}
		return nil
	})
	if err != nil {
		return err
	}
	// A snapshot whose last messages were deleted before delivery never ends with a
	// message saying nothing is pending: ask the consumer.
	drained := time.NewTicker(drainCheck)
	defer drained.Stop()
	var rescan <-chan time.Time
	if w.r.rescan > 0 {
		t := time.NewTicker(w.r.rescan)
		defer t.Stop()
		rescan = t.C
	}
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
		case <-drained.C:
			done, err := fd.ifDrained(sctx, endSnapshot)
			if err != nil {
				return err
			}
			if done {
				drained.Stop()
			}
		case <-rescan:
			if err := w.rescan(sctx, fd, func() bool { return snapshotted }); err != nil {
				return err
			}
		}
	}
}

// rescan finds the entries that left without a trace — purged, or deleted by a
// server limit without a marker — by reading which subjects still hold a message,
// and reports them Removed. It holds off until the snapshot is done (synced, called
// under fd.mu, says so). A known entry is judged only if it is no newer than the
// stream was when the read began: anything newer may simply have been written
// after the read took its view.
func (w *watch) rescan(ctx context.Context, fd *feed, synced func() bool) error {
	rctx, cancel := context.WithTimeout(ctx, rescanTimeout)
	last, present, err := w.r.subjectsHeld(rctx, w.filters)
	cancel()
	if err != nil {
		if ctx.Err() == nil {
			// The feed is still good; the next rescan tries again.
			w.r.log.Warn("watch cannot re-read state to find removals", "filter", w.filters, "error", err)
		}
		return nil
	}
	fd.mu.Lock()
	defer fd.mu.Unlock()
	if fd.stopped || !synced() {
		return nil
	}
	for subj, e := range w.known {
		if _, ok := present[subj]; !ok && e.seq <= last {
			if err := w.drop(ctx, subj); err != nil {
				return err
			}
		}
	}
	return nil
}

// begin starts a session. Every session after the first re-reads the whole state:
// it forgets what the last one read and tells the Front that the state follows
// again, so that what the last one missed — a removal whose marker expired, a
// purge — reaches the watcher as a difference.
func (w *watch) begin(ctx context.Context) error {
	if !w.reread {
		w.reread = true
		return nil
	}
	clear(w.known)
	clear(w.byKey)
	return w.send(ctx, registry.Reread, endpoint.Endpoint{})
}

// handle turns one message, written at tm with headers h, into the events it
// means.
func (w *watch) handle(ctx context.Context, d decoded, tm int64, h nats.Header) error {
	switch d.kind {
	case msgForeign:
		return nil
	case msgLive:
		// Only a live entry's expiry is needed (set): markers and foreign or bad
		// messages skip the Nats-TTL look-up.
		return w.set(ctx, d.subject, watchEntry{d.ep, d.seq, written{tm, expiresAt(h, tm, w.maxAge)}})
	}
	if d.kind == msgBad {
		w.r.noteBad(d)
	}
	// A removal, a marker, or garbage that replaced the entry: in each case the
	// subject no longer holds a live entry, which List agrees with.
	return w.drop(ctx, d.subject)
}

// expiresAt is when a message written at tm (Unix nanoseconds) expires: by its
// Nats-TTL as the server reads it, capped by the stream's MaxAge (0: none), or by
// MaxAge alone without a Nats-TTL. 0 when it never does or when tm is unknown.
func expiresAt(h nats.Header, tm int64, maxAge time.Duration) int64 {
	life, d := lifetimeOf(h), maxAge
	switch {
	case tm == 0 || life.never:
		return 0
	case life.ttl > 0 && (maxAge == 0 || life.ttl < maxAge):
		d = life.ttl
	}
	if d == 0 {
		return 0
	}
	return tm + int64(d)
}

// view is the entry the watcher has been told about for k.
func (w *watch) view(k endpoint.Key) (watchEntry, bool) {
	var best watchEntry
	subjects := w.byKey[k]
	for _, s := range subjects {
		if e := w.known[s]; e.seq >= best.seq {
			best = e
		}
	}
	return best, len(subjects) > 0
}

// set records a live entry on subject and tells the watcher what changed for its key.
func (w *watch) set(ctx context.Context, subject string, e watchEntry) error {
	k := e.ep.Key()
	before, had := w.view(k)
	if old, ok := w.known[subject]; ok && (old.ep.Key() != k || old.expires > 0 && e.tm >= old.expires) {
		// The subject's old entry is gone first when its key differs (the id token
		// is trusted, not recomputed, so a subject's next payload may name another
		// port) or when it had expired by the time this one was written: the
		// server removed it, and this message's rollup purges the expiry marker
		// that said so, which a watch that lagged behind never reads.
		if err := w.drop(ctx, subject); err != nil {
			return err
		}
		before, had = w.view(k)
	}
	if _, ok := w.known[subject]; !ok {
		w.byKey[k] = append(w.byKey[k], subject)
	}
	w.known[subject] = e
	after, _ := w.view(k)
	switch {
	case !had:
		return w.send(ctx, registry.Added, after.ep)
	case !endpoint.Equal(before.ep, after.ep):
		return w.send(ctx, registry.Updated, after.ep)
	}
	return nil // a refresh with the same fields
}

// drop forgets subject's entry, if there was one, and tells the watcher what changed
// for its key.
func (w *watch) drop(ctx context.Context, subject string) error {
	old, ok := w.known[subject]
	if !ok {
		return nil
	}
	k := old.ep.Key()
	before, _ := w.view(k)
	delete(w.known, subject)
	rest := slices.DeleteFunc(w.byKey[k], func(s string) bool { return s == subject })
	if len(rest) == 0 {
		delete(w.byKey, k)
		return w.send(ctx, registry.Removed, before.ep)
	}
	w.byKey[k] = rest
	if after, _ := w.view(k); !endpoint.Equal(before.ep, after.ep) {
		return w.send(ctx, registry.Updated, after.ep)
	}
	return nil
}

func (w *watch) send(ctx context.Context, t registry.EventType, ep endpoint.Endpoint) error {
	select {
	case w.out <- registry.Event{Type: t, Endpoint: detach(ep)}: // known's copy is shared
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}
