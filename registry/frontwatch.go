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
// for an unknown one as Added, a Removed for an unknown one is dropped, an Updated
// that leaves the endpoint as the caller holds it is dropped). A re-read of the
// backend's whole state (Reread, the state, Synced) reaches the caller as its
// differences from what the caller holds (Diff). The channel
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
	send := func(ev Event) bool {
		select {
		case out <- ev:
			return true
		case <-cctx.Done():
			reason = endReason(ctx)
			return false
		}
	}
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
			if ev.Type == Reread || v.reread != nil {
				if !v.take(ev, send) {
					return
				}
				continue
			}
			// The usual event is sent here rather than through send: an Event is
			// large, and each call would copy it again.
			if ev, ok = v.admit(ev); !ok {
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

// view is what a watcher's caller holds: a sum of each endpoint it was told about
// (see sum: not the endpoint itself), and whether it has had Synced; while the
// backend re-reads its state, also the state read so far.
//
// The sums sit in a slice, each key's map entry naming its slot: an update, the
// most common event, then rewrites its slot without hashing the key a second time
// to store the new sum.
type view struct {
	slots  map[endpoint.Key]int32
	sums   []uint64 // by slot
	free   []int32  // slots of endpoints removed, to reuse
	synced bool
	// reread collects a re-read's state, by key, until its Synced; nil when no
	// re-read is under way.
	reread map[endpoint.Key]endpoint.Endpoint
}

// take applies a Reread, or an event of the re-read under way, to the view: it
// collects the state, and once the re-read's Synced has come sends the caller the
// differences; false when send gave up.
func (v *view) take(ev Event, send func(Event) bool) bool {
	switch ev.Type {
	case Reread:
		// A re-read cut short by another starts over: the new one is the whole state.
		v.reread = make(map[endpoint.Key]endpoint.Endpoint, len(v.slots))
	case Added, Updated:
		v.reread[ev.Endpoint.Key()] = ev.Endpoint
	case Removed:
		delete(v.reread, ev.Endpoint.Key())
	case Synced:
		return v.settle(send)
	}
	return true
}

// settle sends the caller the differences between what it holds and the re-read
// state: removals, then updates, then additions, each in endpoint order; then
// Synced, if the caller has not had it yet.
func (v *view) settle(send func(Event) bool) bool {
	state := v.reread
	v.reread = nil
	var groups [3][]endpoint.Endpoint // by type: added, updated, removed
	Diff(v.slots, state, func(slot int32, e endpoint.Endpoint) bool { return v.sums[slot] == sum(e) },
		func(t EventType, _ endpoint.Key, e endpoint.Endpoint) bool {
			groups[t-Added] = append(groups[t-Added], e)
			return true
		})
	for _, t := range [...]EventType{Removed, Updated, Added} {
		eps := groups[t-Added]
		endpoint.Sort(eps)
		for _, e := range eps {
			if ev, ok := v.admit(Event{Type: t, Endpoint: e}); ok && !send(ev) {
				return false
			}
		}
	}
	if ev, ok := v.admit(Event{Type: Synced}); ok {
		return send(ev)
	}
	return true
}

// admit fits ev to what the caller holds, or reports that it tells the caller
// nothing: an Updated (or Added) that leaves a held endpoint as it was, a Removed of
// one it does not hold, a second Synced.
func (v *view) admit(ev Event) (Event, bool) {
	if ev.Type == Synced {
		if v.synced {
			return ev, false
		}
		v.synced = true
		return Event{Type: Synced}, true
	}
	if v.slots == nil {
		v.slots = map[endpoint.Key]int32{}
	}
	k := ev.Endpoint.Key()
	slot, held := v.slots[k]
	switch ev.Type {
	case Added, Updated:
		s := sum(ev.Endpoint)
		switch {
		case !held:
			ev.Type = Added
			v.slots[k] = v.hold(s)
		case v.sums[slot] == s:
			return ev, false
		default:
			ev.Type = Updated
			v.sums[slot] = s
		}
	case Removed:
		if !held {
			return ev, false
		}
		delete(v.slots, k)
		v.free = append(v.free, slot)
	default:
		return ev, false
	}
	return ev, true
}

// hold stores the sum of a newly held endpoint and returns its slot.
func (v *view) hold(s uint64) int32 {
	if n := len(v.free); n > 0 {
		slot := v.free[n-1]
		v.free = v.free[:n-1]
		v.sums[slot] = s
		return slot
	}
	v.sums = append(v.sums, s)
	return int32(len(v.sums) - 1)
}
