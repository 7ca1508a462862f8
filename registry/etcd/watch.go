package etcd

import (
	"bytes"
	"context"
	"errors"
	"hash/maphash"
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
	w := &watcher{r: r, f: f, start: start, end: end, sent: sums(state), rev: rev, out: make(chan registry.Event),
		// Jittered so that many watchers do not retry in step.
		retry: backoff.Backoff{Min: 100 * time.Millisecond, Max: 5 * time.Second}}
	go w.run(ctx, sorted(state))
	return w.out, nil
}

// watcher is one Watch: what it has sent (sent) and the revision that is at.
//
// It keeps, per etcd key it has sent as present, only a sum of the value, not the
// endpoint: etcd hands each event the value it replaces (WithPrevKV), which is what
// a Removed carries and what a PUT is compared with. At 100,000 endpoints a map of
// endpoints was 27 MB that the garbage collector scanned word by word; this is
// 7.6 MB, with one pointer per key.
type watcher struct {
	r          *driver
	f          endpoint.Filter
	start, end string
	sent       map[string]uint64 // value sums by etcd key
	rev        int64
	out        chan registry.Event
	retry      backoff.Backoff
}

// sums returns the value sum of every key of state.
func sums(state map[string]held) map[string]uint64 {
	out := make(map[string]uint64, len(state))
	for k, h := range state {
		out[k] = h.sum
	}
	return out
}

// valueSeed makes valueSum's sums; they live as long as the process.
var valueSeed = maphash.MakeSeed()

// valueSum is the sum a watcher keeps of a value it has sent.
func valueSum(v []byte) uint64 { return maphash.Bytes(valueSeed, v) }

func (w *watcher) run(ctx context.Context, initial []endpoint.Endpoint) {
	defer close(w.out)
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

// change applies one etcd event to what w has sent and returns the event to send,
// if any. A value that is not a valid endpoint counts as a removal.
func (w *watcher) change(ev *clientv3.Event) (registry.Event, bool) {
	key := string(ev.Kv.Key)
	sum, had := w.sent[key]
	if ev.Type == clientv3.EventTypePut {
		if ep, ok := w.r.decode(ev.Kv.Key, ev.Kv.Value); ok && w.f.Match(ep) {
			w.sent[key] = valueSum(ev.Kv.Value)
			switch {
			case !had:
				return registry.Event{Type: registry.Added, Endpoint: ep}, true
			case w.unchanged(ev, ep, sum):
				return registry.Event{}, false // a refresh that changes nothing
			}
			return registry.Event{Type: registry.Updated, Endpoint: ep}, true
		}
	}
	if !had {
		return registry.Event{}, false
	}
	delete(w.sent, key)
	return registry.Event{Type: registry.Removed, Endpoint: w.previous(ev)}, true
}

// unchanged reports whether a PUT of a key w has sent, as ep, leaves it as sent:
// the same bytes, or bytes that decode to an equal endpoint (another writer's
// encoding). Without the previous value, which etcd omits once that revision is
// compacted, the kept sum decides.
func (w *watcher) unchanged(ev *clientv3.Event, ep endpoint.Endpoint, sum uint64) bool {
	if ev.PrevKv == nil {
		return valueSum(ev.Kv.Value) == sum
	}
	if bytes.Equal(ev.PrevKv.Value, ev.Kv.Value) {
		return true
	}
	prev, err := w.r.layout.decode(ev.PrevKv.Key, ev.PrevKv.Value)
	return err == nil && endpoint.Equal(prev, ep)
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

// resync re-reads the range at the current revision and sends the differences
// from what this watcher has sent, retrying until it succeeds or ctx ends. A key
// gone meanwhile is Removed with its key fields only: its last value is compacted
// away.
func (w *watcher) resync(ctx context.Context) bool {
	for {
		state, rev, err := w.r.snapshot(ctx, w.f, w.start, w.end)
		if err == nil {
			events := diff(w.r.layout, w.sent, state)
			w.sent, w.rev = sums(state), rev
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

// diff returns the events that turn what was sent (value sums by etcd key) into
// cur: removals, then updates, then additions, each in endpoint order.
func diff(l layout, sent map[string]uint64, cur map[string]held) []registry.Event {
	var removed, updated, added []endpoint.Endpoint
	for k := range sent {
		if _, ok := cur[k]; !ok {
			removed = append(removed, keyOnly(l, k))
		}
	}
	for k, h := range cur {
		sum, ok := sent[k]
		switch {
		case !ok:
			added = append(added, h.ep)
		case sum != h.sum:
			updated = append(updated, h.ep)
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
