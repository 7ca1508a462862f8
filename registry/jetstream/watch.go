package jetstream

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/internal/backoff"
	"github.com/switchboard-mesh/switchboard/registry"
)

const (
	minBackoff = 100 * time.Millisecond
	maxBackoff = 5 * time.Second
)

var errReconnected = errors.New("connection re-established")

// Watch streams changes to the entries matching f: every live entry as Added, then
// Synced, then Added/Updated/Removed as they happen. Removals include expiries (the
// server's delete markers) and Unregister.
//
// Each session reads the stream through a fresh feed and diffs it against what the
// watcher has already been told. When a session breaks — a skipped delivery, a
// reconnect, missed heartbeats — the next one re-reads the state the same way, so
// the watcher gets only the differences and never misses a removal whose marker
// expired while it was away.
func (r *Registry) Watch(ctx context.Context, f endpoint.Filter) (<-chan registry.Event, error) {
	if err := f.Validate(); err != nil {
		return nil, fmt.Errorf("filter: %w", err)
	}
	if err := r.checkOpen(); err != nil {
		return nil, err
	}
	w := &watch{r: r, filter: r.subj.Filter(f), out: make(chan registry.Event, 1024), known: map[string]endpoint.Endpoint{}, dec: r.decoder()}
	// The first feed is opened here so an unreachable stream fails the call; later
	// sessions retry until the watch ends.
	fd, err := r.openFeed(ctx, w.filter)
	if err != nil {
		return nil, unavailable(fmt.Errorf("watch %s: %w", r.cfg.Name, err))
	}
	ctx, cancel := context.WithCancel(ctx)
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		cancel()
		fd.stop(ctx)
		return nil, registry.ErrClosed
	}
	r.watches[w] = cancel
	r.wg.Add(1)
	r.mu.Unlock()
	go w.run(ctx, cancel, fd)
	return w.out, nil
}

type watch struct {
	r      *Registry
	filter string
	out    chan registry.Event
	// known is what the watcher has been told, by subject. Only the goroutine
	// running the current session's handler touches it.
	known  map[string]endpoint.Endpoint
	dec    *decoder
	synced bool
}

func (w *watch) run(ctx context.Context, cancel context.CancelFunc, fd *feed) {
	defer w.r.wg.Done()
	defer close(w.out)
	defer func() {
		cancel()
		w.r.mu.Lock()
		delete(w.r.watches, w)
		w.r.mu.Unlock()
	}()
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
		w.r.log.Warn("watch interrupted, re-reading state", "filter", w.filter, "error", err)
		for fd = nil; fd == nil; {
			if !retry.Wait(ctx) {
				return
			}
			if fd, err = w.r.openFeed(ctx, w.filter); err != nil {
				w.r.log.Warn("watch cannot create consumer", "filter", w.filter, "error", err)
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

	// Live subjects of this session's snapshot; nil once done.
	seen := make(map[string]struct{}, fd.pending)
	if len(w.known) == 0 {
		w.known = make(map[string]endpoint.Endpoint, fd.pending)
	}
	if fd.pending == 0 {
		if err := w.endSnapshot(sctx, seen); err != nil {
			return err
		}
		seen = nil
	}
	err := fd.start(func(subject string, h nats.Header, data []byte, pending uint64) error {
		if err := w.handle(sctx, w.dec.decode(subject, h, data), seen); err != nil {
			return err
		}
		if seen != nil && pending == 0 {
			err := w.endSnapshot(sctx, seen)
			seen = nil
			return err
		}
		return nil
	})
	if err != nil {
		return err
	}
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
	}
}

// handle turns one message into at most one event. seen, while non-nil, collects the
// live subjects of the session's snapshot.
func (w *watch) handle(ctx context.Context, d decoded, seen map[string]struct{}) error {
	if d.kind == msgLive {
		if seen != nil {
			seen[d.subject] = struct{}{}
		}
		old, ok := w.known[d.subject]
		w.known[d.subject] = d.ep
		switch {
		case !ok:
			return w.send(ctx, registry.Added, d.ep)
		case !endpoint.Equal(old, d.ep):
			return w.send(ctx, registry.Updated, d.ep)
		}
		return nil // a refresh with the same fields, or a resync repeat
	}
	if d.kind == msgBad {
		w.r.noteBad(d)
	}
	// A removal, a marker, or garbage that replaced the entry: in each case the
	// subject no longer holds a live entry, which List agrees with.
	old, ok := w.known[d.subject]
	if !ok {
		return nil
	}
	delete(w.known, d.subject)
	return w.send(ctx, registry.Removed, old)
}

// endSnapshot removes what the snapshot no longer holds and, the first time, tells
// the watcher it has the whole initial state.
func (w *watch) endSnapshot(ctx context.Context, seen map[string]struct{}) error {
	for subj, ep := range w.known {
		if _, ok := seen[subj]; !ok {
			delete(w.known, subj)
			if err := w.send(ctx, registry.Removed, ep); err != nil {
				return err
			}
		}
	}
	if w.synced {
		return nil
	}
	w.synced = true
	return w.send(ctx, registry.Synced, endpoint.Endpoint{})
}

func (w *watch) send(ctx context.Context, t registry.EventType, ep endpoint.Endpoint) error {
	select {
	case w.out <- registry.Event{Type: t, Endpoint: detach(ep)}: // known's copy is shared
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}
