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
//
// The watcher keeps no endpoints and no record of what it sent: it sends each
// change as etcd reports it, and after a re-read the whole range again, and the
// registry.Front sends the caller only what changes what the caller holds.
func (r *driver) Watch(ctx context.Context, f endpoint.Filter) (<-chan registry.Event, error) {
	start, end := r.layout.span(f)
	state, rev, err := r.snapshot(ctx, f, start, end)
	if err != nil {
		return nil, err
	}
	w := &watcher{r: r, f: f, start: start, end: end, rev: rev, out: make(chan registry.Event),
		// Jittered so that many watchers do not retry in step.
		retry: backoff.Backoff{Min: 100 * time.Millisecond, Max: 5 * time.Second}}
	go w.run(ctx, state)
	return w.out, nil
}

// watcher is one Watch: the revision it has sent every change up to.
type watcher struct {
	r          *driver
	f          endpoint.Filter
	start, end string
	rev        int64
	out        chan registry.Event
	retry      backoff.Backoff
}

func (w *watcher) run(ctx context.Context, initial []endpoint.Endpoint) {
	defer close(w.out)
	if !w.sendState(ctx, initial) {
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

// sendState sends a whole state read: each endpoint as Added, then Synced.
func (w *watcher) sendState(ctx context.Context, state []endpoint.Endpoint) bool {
	for _, ep := range state {
		if !w.send(ctx, registry.Event{Type: registry.Added, Endpoint: ep}) {
			return false
		}
	}
	return w.send(ctx, registry.Event{Type: registry.Synced})
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
	ch := w.r.client.Watch(wctx, w.start, clientv3.WithRange(w.end), clientv3.WithRev(w.rev+1),
		clientv3.WithProgressNotify(), clientv3.WithPrevKV())
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

// change turns one etcd event into the event to send. A PUT of a value that is
// not a valid endpoint, or that the filter does not match, counts as a removal; so
// does a DELETE. The Front drops what does not change what the caller holds: a
// removal of a key it never sent, a refresh that changes nothing.
func (w *watcher) change(ev *clientv3.Event) (registry.Event, bool) {
	if ev.Type == clientv3.EventTypePut {
		if ep, ok := w.r.decode(ev.Kv.Key, ev.Kv.Value); ok && w.f.Match(ep) {
			if ev.IsCreate() {
				return registry.Event{Type: registry.Added, Endpoint: ep}, true
			}
			return registry.Event{Type: registry.Updated, Endpoint: ep}, true
		}
	}
	return registry.Event{Type: registry.Removed, Endpoint: w.previous(ev)}, true
}

// previous is the endpoint a removal takes away: the value etcd replaced (the one
// w sent last, since w has seen every revision of the key), or, without it, the
// key's fields alone, which is all the registry promises of a Removed.
func (w *watcher) previous(ev *clientv3.Event) endpoint.Endpoint {
	if ev.PrevKv != nil {
		if ep, err := w.r.layout.decode(ev.PrevKv.Key, ev.PrevKv.Value); err == nil {
			return ep
		}
	}
	return keyOnly(w.r.layout, string(ev.Kv.Key))
}

// keyOnly is the endpoint with the key fields of an etcd key that a watcher sent,
// so one that parses.
func keyOnly(l layout, key string) endpoint.Endpoint {
	k, _ := l.parse(key)
	return k.Endpoint()
}

// resync re-reads the range at the current revision and sends it whole, after a
// Reread: the Front sends the caller only the differences from what it holds.
// It retries until the read succeeds or ctx ends. A key gone meanwhile reaches the
// caller Removed with its key fields only: its last value is compacted away.
func (w *watcher) resync(ctx context.Context) bool {
	for {
		state, rev, err := w.r.snapshot(ctx, w.f, w.start, w.end)
		if err == nil {
			w.rev = rev
			if h := w.r.hooks.resynced; h != nil {
				h(rev)
			}
			return w.send(ctx, registry.Event{Type: registry.Reread}) && w.sendState(ctx, state)
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
