package etcd

import (
	"context"
	"errors"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/internal/backoff"
	"github.com/switchboard-mesh/switchboard/registry"
)

// Watch reads the filter's range, then follows it with an etcd watch (see "Watch"
// in doc.go). The initial read happens before Watch returns, so an unreachable etcd
// is reported as an error; later outages are retried until ctx ends or the
// registry closes, which closes the channel.
func (r *driver) Watch(ctx context.Context, f endpoint.Filter) (<-chan registry.Event, error) {
	start, end := r.layout.span(f)
	state, rev, err := r.snapshot(ctx, f, start, end)
	if err != nil {
		return nil, err
	}
	w := &watcher{r: r, f: f, start: start, end: end, state: state, rev: rev, out: make(chan registry.Event),
		// Jittered so that many watchers do not retry in step.
		retry: backoff.Backoff{Min: 100 * time.Millisecond, Max: 5 * time.Second}}
	go w.run(ctx)
	return w.out, nil
}

// watcher is one Watch: what it has sent (state) and the revision that state is at.
type watcher struct {
	r          *driver
	f          endpoint.Filter
	start, end string
	state      map[string]endpoint.Endpoint // by etcd key
	rev        int64
	out        chan registry.Event
	retry      backoff.Backoff
}

func (w *watcher) run(ctx context.Context) {
	defer close(w.out)
	initial := make([]endpoint.Endpoint, 0, len(w.state))
	for _, ep := range w.state {
		initial = append(initial, ep)
	}
	endpoint.Sort(initial)
	for _, ep := range initial {
		if !w.send(ctx, registry.Event{Type: registry.Added, Endpoint: ep}) {
			return
		}
	}
	if !w.send(ctx, registry.Event{Type: registry.Synced}) {
		return
	}
	for {
		err := w.follow(ctx)
		switch {
		case ctx.Err() != nil:
			return
		case errors.Is(err, rpctypes.ErrCompacted), errors.Is(err, rpctypes.ErrFutureRev):
			// The history after w.rev is gone (compacted), or etcd is behind us
			// (restored from a backup): only a fresh read can tell what changed.
			w.r.log.Info("etcd watch cannot resume; re-reading its range", "from", w.rev+1, "reason", err)
			if !w.resync(ctx) {
				return
			}
		default:
			w.r.log.Warn("etcd watch ended; resuming", "from", w.rev+1, "err", err)
			if !w.retry.Wait(ctx) {
				return
			}
		}
	}
}

var errStreamClosed = errors.New("etcd watch stream closed")

// follow watches from the revision after w.rev until the watch fails or ends.
func (w *watcher) follow(ctx context.Context) error {
	// Requiring a leader makes a member cut off from the quorum end the watch
	// instead of silently serving nothing; the retry then reaches another member.
	wctx, drop := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer drop()
	if h := w.r.hooks.beforeWatch; h != nil {
		h(w.rev+1, drop)
	}
	ch := w.r.client.Watch(wctx, w.start, clientv3.WithRange(w.end), clientv3.WithRev(w.rev+1), clientv3.WithProgressNotify())
	for resp := range ch {
		if err := resp.Err(); err != nil {
			return err
		}
		w.retry.Reset()
		if !w.handle(ctx, resp) {
			return ctx.Err()
		}
	}
	return errStreamClosed
}

// handle applies one watch response to the state and sends the resulting events.
// A revision is never split across responses, so w.rev only ever names a revision
// whose events were all handled.
func (w *watcher) handle(ctx context.Context, resp clientv3.WatchResponse) bool {
	if resp.IsProgressNotify() {
		w.rev = max(w.rev, resp.Header.Revision)
		return true
	}
	last := w.rev
	for _, ev := range resp.Events {
		if ev.Kv.ModRevision <= w.rev {
			continue // replayed by a client-side reconnect: already handled
		}
		last = ev.Kv.ModRevision
		if e, ok := w.change(ev); ok && !w.send(ctx, e) {
			return false
		}
	}
	w.rev = last
	return true
}

// change applies one etcd event to the state and returns the event to send, if
// any. A value that is not a valid endpoint counts as a removal.
func (w *watcher) change(ev *clientv3.Event) (registry.Event, bool) {
	key := string(ev.Kv.Key)
	old, had := w.state[key]
	if ev.Type == clientv3.EventTypePut {
		if ep, ok := w.r.decode(ev.Kv.Key, ev.Kv.Value); ok && w.f.Match(ep) {
			w.state[key] = ep
			switch {
			case !had:
				return registry.Event{Type: registry.Added, Endpoint: ep}, true
			case !endpoint.Equal(old, ep):
				return registry.Event{Type: registry.Updated, Endpoint: ep}, true
			}
			return registry.Event{}, false // a refresh that changes nothing
		}
	}
	if !had {
		return registry.Event{}, false
	}
	delete(w.state, key)
	return registry.Event{Type: registry.Removed, Endpoint: old}, true
}

// resync re-reads the range at the current revision and sends the differences
// from what this watcher has sent, retrying until it succeeds or ctx ends.
func (w *watcher) resync(ctx context.Context) bool {
	for {
		state, rev, err := w.r.snapshot(ctx, w.f, w.start, w.end)
		if err == nil {
			events := diff(w.state, state)
			w.state, w.rev = state, rev
			if h := w.r.hooks.resynced; h != nil {
				h(rev)
			}
			for _, e := range events {
				if !w.send(ctx, e) {
					return false
				}
			}
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		w.r.log.Warn("etcd watch re-read failed; retrying", "err", err)
		if !w.retry.Wait(ctx) {
			return false
		}
	}
}

func (w *watcher) send(ctx context.Context, e registry.Event) bool {
	select {
	case w.out <- e:
		return true
	case <-ctx.Done():
		return false
	}
}

// diff returns the events that turn old into cur: removals, then updates, then
// additions, each in endpoint order.
func diff(old, cur map[string]endpoint.Endpoint) []registry.Event {
	var removed, updated, added []endpoint.Endpoint
	for k, ep := range old {
		if _, ok := cur[k]; !ok {
			removed = append(removed, ep)
		}
	}
	for k, ep := range cur {
		prev, ok := old[k]
		switch {
		case !ok:
			added = append(added, ep)
		case !endpoint.Equal(prev, ep):
			updated = append(updated, ep)
		}
	}
	var out []registry.Event
	for _, group := range []struct {
		t   registry.EventType
		eps []endpoint.Endpoint
	}{{registry.Removed, removed}, {registry.Updated, updated}, {registry.Added, added}} {
		endpoint.Sort(group.eps)
		for _, ep := range group.eps {
			out = append(out, registry.Event{Type: group.t, Endpoint: ep})
		}
	}
	return out
}
