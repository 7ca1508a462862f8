package registrar

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/internal/backoff"
	"github.com/switchboard-mesh/switchboard/registrar/internal/view"
	"github.com/switchboard-mesh/switchboard/registry"
	"github.com/switchboard-mesh/switchboard/registry/follow"
)

// syncer keeps the snapshot in line with the backend: a full List every interval,
// and the backend's native watch when it has one (registry/follow). While the watch
// is live the List runs every backstop instead: it only repairs anything the watch
// missed. Every cluster's endpoints are taken, which is how agents learn of other
// clusters (docs/registrar.md, "What it does": Sync); with --hold demanded, one
// syncer takes the registrar's own cluster and one more each service its watchers
// ask for (demand.go).
type syncer struct {
	view *view.View
	// filter is the part of the backend read, scope the keys it covers (nil: all).
	filter endpoint.Filter
	scope  func(endpoint.Key) bool
	// main is the syncer of the registrar's own part: its first read makes the
	// registrar ready, and its feed's state is the registrar's. Another one's
	// first read closes loaded.
	main     bool
	loaded   chan struct{}
	loadOnce sync.Once
	backend  registry.Registry
	interval time.Duration
	backstop time.Duration
	timeout  time.Duration
	log      *slog.Logger
	m        *metrics
	noFeed   chan struct{}             // closed when the backend turns out to have no change feed
	live     atomic.Bool               // the watch has delivered its initial state and not ended
	lastFull atomic.Int64              // when the last full read (List or watch's initial state) ended, Unix ns
	lastErr  atomic.Pointer[syncError] // the last failed read, for Status (inspect.go)
}

func (y *syncer) pollLoop(ctx context.Context) {
	if !y.firstReadByFeed(ctx) {
		y.poll(ctx)
	}
	t := time.NewTicker(y.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if y.live.Load() && time.Since(time.Unix(0, y.lastFull.Load())) < y.backstop {
			continue
		}
		y.poll(ctx)
	}
}

// firstReadByFeed waits, when the backend has a change feed, for the feed's initial
// state to make the registrar ready: at startup the backend is read once, not by a
// poll and the feed at the same time. It reports false when the poll must read
// now: the backend has no feed, or it did not deliver within one interval.
func (y *syncer) firstReadByFeed(ctx context.Context) bool {
	if _, ok := y.backend.(registry.Watcher); !ok {
		return false
	}
	t := time.NewTimer(y.interval)
	defer t.Stop()
	select {
	case <-y.readyCh():
		return true
	case <-y.noFeed:
	case <-t.C:
	case <-ctx.Done():
	}
	return false
}

// setLive notes whether the change feed is live, for pollLoop and for operators
// (registrar_change_feed_live).
func (y *syncer) setLive(live bool) {
	y.live.Store(live)
	if y.main {
		y.view.SetFeedLive(live)
		y.m.feedLive.Set(map[bool]float64{true: 1}[live])
	}
}

// readyCh is closed once the syncer's part has been read in full.
func (y *syncer) readyCh() <-chan struct{} {
	if y.main {
		return y.view.Ready()
	}
	return y.loaded
}

// markReady notes the syncer's first full read of its part.
func (y *syncer) markReady() {
	if y.main {
		y.view.MarkReady()
		return
	}
	y.loadOnce.Do(func() { close(y.loaded) })
}

// apply takes one change of the feed, if it is of the syncer's part (a backend's
// feed of one service also carries the registrar's own cluster's, which the main
// syncer takes).
func (y *syncer) apply(ev registry.Event) {
	if y.scope == nil || y.scope(ev.Endpoint.Key()) {
		y.view.Apply(ev)
	}
}

// poll reads the whole backend once.
func (y *syncer) poll(ctx context.Context) {
	start := y.view.BeginFull()
	began := time.Now()
	pctx, cancel := context.WithTimeout(ctx, y.timeout)
	eps, err := y.backend.List(pctx, y.filter)
	cancel()
	y.m.syncDuration.Observe(time.Since(began).Seconds())
	if err != nil {
		y.view.AbortFull(start)
		if ctx.Err() == nil {
			y.m.syncErrors.Inc()
			y.noteError(err)
			y.log.Warn("polling the registry backend failed", "err", err)
		}
		return
	}
	y.view.EndFullIn(start, eps, y.scope)
	y.lastFull.Store(time.Now().UnixNano())
	y.markReady()
}

// watchLoop follows the backend's change feed, re-opening it with backoff when it
// ends, until ctx ends. It returns at once when the backend has no feed. Its initial
// state is a full read like a poll; later events apply one by one.
func (y *syncer) watchLoop(ctx context.Context) {
	w, ok := y.backend.(registry.Watcher)
	if !ok {
		return
	}
	var start uint64
	var began time.Time
	err := follow.Run(ctx, w, y.filter, backoff.Backoff{Min: 100 * time.Millisecond, Max: 5 * time.Second}, follow.Handler{
		Open: func() { start, began = y.view.BeginFull(), time.Now() },
		Synced: func(state map[endpoint.Key]endpoint.Endpoint) {
			y.m.syncDuration.Observe(time.Since(began).Seconds())
			eps := make([]endpoint.Endpoint, 0, len(state))
			for _, e := range state {
				eps = append(eps, e)
			}
			y.view.EndFullIn(start, eps, y.scope)
			y.lastFull.Store(time.Now().UnixNano())
			y.setLive(true)
			y.markReady()
		},
		Changed: y.apply,
		Ended: func(err error, synced bool, wait time.Duration) {
			y.setLive(false) // poll every interval until it is back
			if !synced {
				y.view.AbortFull(start)
			}
			if ctx.Err() == nil && !errors.Is(err, registry.ErrNoWatch) {
				y.m.syncErrors.Inc()
				y.noteError(err)
				y.log.Warn("registry watch ended; re-opening", "err", err, "retry_in", wait)
			}
		},
	})
	if errors.Is(err, registry.ErrNoWatch) {
		y.log.Info("registry backend has no change feed; polling only", "interval", y.interval)
		close(y.noFeed)
	}
}
