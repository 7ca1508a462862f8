package registry

import (
	"context"
	"fmt"
	"time"

	"github.com/switchboard-mesh/switchboard/endpoint"
)

// Watch validates the filter and follows the backend's change feed, or fails with
// ErrNoWatch when it has none.
//
// Whatever the backend sends, the caller's channel holds to the Watcher contract: one
// Synced; Added only for an endpoint the caller does not hold, Updated and Removed
// only for one it does (an Added for a held endpoint arrives as Updated, an Updated
// for an unknown one as Added, a Removed for an unknown one is dropped). The channel
// is closed when ctx ends, when the registry closes, or when the backend ends the
// watch; Close returns only once it is.
func (f *Front) Watch(ctx context.Context, filter endpoint.Filter) (<-chan Event, error) {
	start := time.Now()
	if err := f.enter(); err != nil {
		f.m.observe(opWatch, start, &err)
		return nil, err
	}
	ch, err := f.watch(ctx, filter)
	f.m.observe(opWatch, start, &err)
	if err != nil {
		f.done()
	}
	return ch, err
}

// watch opens an admitted watch; on success its forwarder ends the call.
func (f *Front) watch(ctx context.Context, filter endpoint.Filter) (<-chan Event, error) {
	if f.wd == nil {
		return nil, fmt.Errorf("%w: %s", ErrNoWatch, f.name)
	}
	filter, err := checkFilter(ctx, filter)
	if err != nil {
		return nil, err
	}
	cctx, cancel := f.bind(ctx)
	in, err := f.wd.Watch(cctx, filter)
	if err == nil && in == nil {
		// Forwarding a nil channel would wait for it forever, and Close with it.
		err = fmt.Errorf("registry backend %s: Watch returned no channel", f.name)
	}
	if err != nil {
		cancel()
		return nil, f.result(ctx, err)
	}
	out := make(chan Event)
	f.m.watches.Inc()
	go f.forward(ctx, cctx, cancel, in, out)
	return out, nil
}

// forward hands the backend's events to the caller until one side ends, then waits
// for the backend to close its channel: only then has the watch returned.
func (f *Front) forward(ctx, cctx context.Context, cancel context.CancelFunc, in <-chan Event, out chan<- Event) {
	reason := "backend"
	defer f.done()
	defer func() {
		close(out)
		cancel()
		for range in {
		}
		f.m.watches.Dec()
		f.m.watchEnd(reason)
	}()
	var v view
	for {
		select {
		case ev, ok := <-in:
			if !ok {
				if cctx.Err() != nil {
					// The backend closed because the watch's context ended: when both
					// were ready, select may have picked this case first.
					reason = endReason(ctx)
				}
				return
			}
			ev, ok = v.admit(ev)
			if !ok {
				continue
			}
			select {
			case out <- ev:
			case <-cctx.Done():
				reason = endReason(ctx)
				return
			}
		case <-cctx.Done():
			reason = endReason(ctx)
			return
		}
	}
}

// endReason says why a watch whose context ended did so: its caller, or Close.
func endReason(ctx context.Context) string {
	if ctx.Err() != nil {
		return "context"
	}
	return "closed"
}

// view is what a watcher's caller holds: the keys it was told about, and whether it
// has had Synced.
type view struct {
	keys   map[endpoint.Key]struct{}
	synced bool
}

// admit fits ev to what the caller holds, or reports that it tells the caller nothing.
func (v *view) admit(ev Event) (Event, bool) {
	if ev.Type == Synced {
		if v.synced {
			return ev, false
		}
		v.synced = true
		return Event{Type: Synced}, true
	}
	if v.keys == nil {
		v.keys = map[endpoint.Key]struct{}{}
	}
	k := ev.Endpoint.Key()
	_, held := v.keys[k]
	switch ev.Type {
	case Added, Updated:
		if held {
			ev.Type = Updated
		} else {
			ev.Type = Added
			v.keys[k] = struct{}{}
		}
	case Removed:
		if !held {
			return ev, false
		}
		delete(v.keys, k)
	default:
		return ev, false
	}
	return ev, true
}
