package mirror

import (
	"context"
	"errors"

	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/internal/backoff"
	"github.com/switchboard-mesh/switchboard/registry"
)

// watchLoop follows the change feed, opening it again whenever it ends. It returns
// registry.ErrNoWatch if the backend turns out to have no feed, nil when ctx ends.
func (m *Mirror) watchLoop(ctx context.Context, w registry.Watcher) error {
	b := m.retry()
	for ctx.Err() == nil {
		synced, err := m.watchOnce(ctx, w)
		if errors.Is(err, registry.ErrNoWatch) {
			return err
		}
		if ctx.Err() != nil {
			return nil
		}
		if synced {
			b.Reset() // the feed worked for a while: start the backoff again
		}
		if err == nil {
			err = errors.New("change feed ended")
		}
		wait := b.Next()
		m.log.Warn("registry watch interrupted; serving the last known endpoints", "err", err, "retry_in", wait)
		if !backoff.Sleep(ctx, wait) {
			return nil
		}
	}
	return nil
}

// watchOnce runs one watch. The initial state is collected apart and swapped in at
// Synced, so a re-opened feed replaces the copy without showing a half-built one.
func (m *Mirror) watchOnce(ctx context.Context, w registry.Watcher) (synced bool, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ch, err := w.Watch(ctx, m.opts.Filter)
	if err != nil {
		return false, err
	}
	initial := map[endpoint.Key]endpoint.Endpoint{}
	for ev := range ch {
		switch {
		case ev.Type == registry.Synced:
			m.replace(initial)
			synced, initial = true, nil
		case !synced && ev.Type == registry.Removed:
			delete(initial, ev.Endpoint.Key())
		case !synced:
			initial[ev.Endpoint.Key()] = ev.Endpoint
		default:
			m.apply(ev)
		}
	}
	return synced, nil
}
