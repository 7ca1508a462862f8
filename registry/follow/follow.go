// Package follow keeps a copy in line with a registry's change feed, the way a
// Kubernetes informer does: it watches, collects the initial state until Synced and
// hands it over whole, then hands over each change; when the watch ends it opens it
// again, with backoff. The registrar's snapshot and the agent's mirror both follow
// their backend this way.
package follow

import (
	"context"
	"errors"
	"time"

	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/internal/backoff"
	"github.com/switchboard-mesh/switchboard/registry"
)

// ErrEnded is the error Handler.Ended gets for a watch the backend closed.
var ErrEnded = errors.New("change feed ended")

// Handler receives what a follow sees. Synced and Changed are required.
type Handler struct {
	// Open, if set, runs before each watch is opened.
	Open func()
	// Synced receives a watch's complete initial state, by key. A watch opened again
	// after an interruption sends its initial state again: Synced replaces the copy.
	Synced func(state map[endpoint.Key]endpoint.Endpoint)
	// Changed receives each change after Synced.
	Changed func(ev registry.Event)
	// Ended, if set, runs after every watch, however it ended (or failed to open):
	// synced says whether it reached Synced, wait how long until the next attempt, 0
	// when Run returns next: ctx ended, or err matches registry.ErrNoWatch.
	Ended func(err error, synced bool, wait time.Duration)
}

// Run follows w's view of f until ctx ends (it returns nil then) or the backend turns
// out to have no change feed (it returns the error, which matches
// registry.ErrNoWatch). Between watches it waits as retry says; a watch that reached
// Synced starts the backoff over.
func Run(ctx context.Context, w registry.Watcher, f endpoint.Filter, retry backoff.Backoff, h Handler) error {
	ended := func(err error, synced bool, wait time.Duration) {
		if h.Ended != nil {
			h.Ended(err, synced, wait)
		}
	}
	for ctx.Err() == nil {
		synced, err := once(ctx, w, f, h)
		switch {
		case errors.Is(err, registry.ErrNoWatch):
			ended(err, false, 0)
			return err
		case ctx.Err() != nil:
			ended(ctx.Err(), synced, 0)
			return nil //nolint:nilerr // ending with ctx is how Run is stopped, not a failure
		}
		if synced {
			retry.Reset()
		}
		wait := retry.Next()
		ended(err, synced, wait)
		if !backoff.Sleep(ctx, wait) {
			return nil
		}
	}
	return nil
}

// once runs one watch to its end and reports whether it reached Synced.
func once(ctx context.Context, w registry.Watcher, f endpoint.Filter, h Handler) (bool, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if h.Open != nil {
		h.Open()
	}
	ch, err := w.Watch(ctx, f)
	if err != nil {
		return false, err
	}
	initial := map[endpoint.Key]endpoint.Endpoint{}
	synced := false
	for ev := range ch {
		switch {
		case synced:
			h.Changed(ev)
		case ev.Type == registry.Synced:
			h.Synced(initial)
			initial, synced = nil, true
		case ev.Type == registry.Removed:
			delete(initial, ev.Endpoint.Key())
		default:
			initial[ev.Endpoint.Key()] = ev.Endpoint
		}
	}
	return synced, ErrEnded
}
