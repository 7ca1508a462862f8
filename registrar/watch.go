package registrar

import (
	"context"
	"log/slog"
	"net"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	registrarv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/registrar/v1"
	"github.com/switchboard-mesh/switchboard/internal/wire"
	"github.com/switchboard-mesh/switchboard/registrar/internal/hub"
	"github.com/switchboard-mesh/switchboard/registrar/internal/view"
	"github.com/switchboard-mesh/switchboard/registrar/token"
)

// watcher is one agent's stream. Watchers share the history ring and keep only a
// cursor (the next sequence to send), so an idle watcher costs a few words, one
// event is encoded once for all of them, and a slow one holds up nobody: when its
// cursor falls out of the ring it is resynced with a full snapshot.
//
// An idle watcher is its stream's handler goroutine, waiting, plus this struct;
// the work — receiving the request, sending — is done by the hub's senders, so
// that the waiting goroutine keeps its smallest stack. Its fields are ordered to
// pack into 224 bytes, a size class of the allocator (TestWatcherStaysInItsSizeClass).
type watcher struct {
	r      *Registrar
	stream grpc.ServerStream
	ctx    context.Context
	peer   net.Addr // nil if unknown
	node   string
	scope
	// rescope delivers a scoped stream's new sets of services; nil when the stream
	// cannot change its set.
	rescope chan scope
	done    chan error     // the error that ended the stream, from its sender
	snap    *view.Snapshot // the snapshot being sent, nil when none
	id      uint64
	next    uint64 // the sequence of the next event to send
	// resumeAt, while resumed, is the version its SNAPSHOT_COMPLETE carries.
	resumeAt uint64
	// cursor is next as the sender left it after a send, or when w was
	// current; 0 until w's first snapshot is complete. Status reads it
	// (inspect.go): next is the sender's alone.
	cursor atomic.Uint64
	// Member is w's part in the hub: its run state (idle, queued, rerun or
	// finished), its slot, the period its send under way began in.
	hub.Member
	pr     progress
	chunk  int32         // the next of snap's chunks to send
	wake   atomic.Uint32 // wakeEnded, wakeRescope: what woken must look at
	flight atomic.Int32  // landed, flying or waiting: a paced message (batch.go)
	// sentType and sentCount are what the message last handed to the stream counts
	// as in registrar_event_broadcast_total, once sent.
	sentType  registrarv1.EndpointEvent_EventType
	sentCount int32
	exact     bool // a WatchEndpointsScoped stream
	opening   bool // openStream has not run yet
	open      bool // openStream has run and registered it
	full      bool // a full snapshot is to be taken
	resumed   bool // replaying the ring from the client's token
	batches   bool // the client accepts BATCH events (batch.go)
	zipped    bool // the client accepts compressed snapshots (compress.go)
}

// peerString is the peer's address for logs.
func (w *watcher) peerString() string {
	if w.peer == nil {
		return ""
	}
	return w.peer.String()
}

// scope is the set of services a watcher receives: nil services means all of them.
// id is the client's name for the set, echoed when a snapshot of it is complete.
type scope struct {
	services map[string]struct{}
	id       uint64
}

func (w *watcher) wants(ev view.Event) bool {
	if w.services == nil || ev.Service == "" {
		return true
	}
	_, ok := w.services[ev.Service]
	return ok
}

// progress tracks, for a scoped watcher, the latest event it was not sent. Once the
// watcher has caught up, it gets that event's version and frontier as a PROGRESS
// (at most one per interval), so its resume token and persisted frontier move on
// although the changes were of other services.
type progress struct {
	skipped skipped     // seq 0: nothing to report
	last    int64       // when the last was sent, Unix nanoseconds
	timer   *time.Timer // schedules the watcher when a PROGRESS is due
}

// skipped is what a PROGRESS reports of an event a scoped watcher was not sent.
type skipped struct{ seq, persisted uint64 }

// progressDue reports whether to send w's PROGRESS now; if one is pending but not yet
// due, it arms the timer that schedules w when it is.
func (w *watcher) progressDue() bool {
	p := &w.pr
	if p.skipped.seq == 0 {
		return false // the common case, on every watcher's every wake: no clock read
	}
	left := w.r.cfg.ProgressInterval - time.Duration(time.Now().UnixNano()-p.last)
	if left <= 0 {
		return true
	}
	if p.timer == nil {
		p.timer = time.AfterFunc(left, w.schedule)
	} else {
		p.timer.Reset(left)
	}
	return false
}

// openWatcher counts w (filled in by the caller, but for its cursor) among the
// connected agents and sets its cursor from the agent's last_version.
func (r *Registrar) openWatcher(w *watcher, lastVersion, cluster string) {
	w.open = true
	st, err := r.view.Since(lastVersion)
	if st.Full && lastVersion != "" {
		r.log.Debug("resume token not usable here; sending a full snapshot", "last_version", lastVersion, "err", err)
	}
	w.full, w.next, w.resumeAt, w.resumed = st.Full, st.Next, st.CompleteAt, st.Resumed
	r.noteOpen(w, cluster) // inspect.go
	r.watchers.Add(1)
	r.m.connected.Inc()
	if r.log.Enabled(context.Background(), slog.LevelDebug) {
		r.logStart(w, lastVersion)
	}
}

// logStart logs a new watch stream. No logger With the watcher's attributes: it
// would live as long as the stream.
func (r *Registrar) logStart(w *watcher, lastVersion string) {
	r.log.Debug("watch started", "watcher", w.id, "node", w.node, "peer", w.peerString(), "last_version", lastVersion, "resumed", w.resumed)
}

// close removes w from the registrar once its stream has ended, undoing
// openWatcher if that ran.
func (w *watcher) close() {
	r := w.r
	r.hub.Remove(&w.Member)
	if !w.open {
		return
	}
	r.noteClose(w) // inspect.go
	if w.pr.timer != nil {
		w.pr.timer.Stop()
	}
	r.m.connected.Dec()
	r.watchers.Add(-1)
}

// sent counts the message pending returned last, which the stream took (a
// BATCH's events were counted when it was built).
func (w *watcher) sent() {
	if w.sentCount > 0 {
		w.r.m.broadcast[w.sentType].Add(float64(w.sentCount))
	}
}

// Wake flags: what woken must look at besides the ring. A fan-out wakes every
// watcher for every event; looking at each stream's context (a chain of gRPC's
// contexts, a cache miss per link) and rescope channel instead was a tenth of
// the registrar's CPU at 10,000 watchers. Whoever ends a stream's context or
// sends a new set of services sets the flag before scheduling the watcher.
const (
	wakeEnded   = 1 << iota // the stream's context may have ended
	wakeRescope             // a new set of services may be waiting in rescope
)

// wakeFor sets flag f and schedules w, so that its next wake looks.
func (w *watcher) wakeFor(f uint32) {
	w.wake.Or(f)
	w.schedule()
}

// woken is what a watcher does on waking before looking for what to send: end
// when its stream or the registrar does, take a new set of services.
func (w *watcher) woken() error {
	select {
	case <-w.r.closing:
		return errShuttingDown
	default:
	}
	f := w.wake.Load()
	if f == 0 {
		return nil
	}
	if f&wakeEnded != 0 {
		if w.ctx.Err() != nil {
			return ended(w.ctx)
		}
		// A scoped stream's w.ctx is derived from the stream's: a context closes
		// its Done before it cancels its children, so the handler can see the
		// stream's end, and flag it, before w.ctx has ended.
		if sctx := w.stream.Context(); sctx.Err() != nil {
			return ended(sctx)
		}
	}
	if f&wakeRescope != 0 {
		w.wake.And(^uint32(wakeRescope)) // before the receive: a later set flags again
		select {
		case sc := <-w.rescope:
			// A new set: a snapshot of it replaces what the client holds.
			w.scope, w.full, w.resumed, w.snap = sc, true, false, nil
			w.pr.skipped = skipped{}
			w.r.noteScope(w) // inspect.go
		default:
		}
	}
	return nil
}

// ended is the status a stream whose context ended returns.
func ended(ctx context.Context) error {
	if st, ok := status.FromError(context.Cause(ctx)); ok {
		return st.Err() // the stream's request reader ended it
	}
	return status.FromContextError(ctx.Err()).Err()
}

// pending returns what w is to be sent next, advancing its cursor past it: a
// snapshot's next chunk or its SNAPSHOT_COMPLETE (a snapshot first taken when w
// needs one), the end of a resumed replay, the ring's next event for w (or, if w
// accepts batches, the ring's next events for w as one BATCH), or a due
// PROGRESS. It returns nil when w is current: then an event appended since will
// have signalled w.
func (w *watcher) pending() any {
	r := w.r
	for {
		if w.snap != nil {
			return w.snapshotPart()
		}
		if w.full {
			w.takeSnapshot()
			continue
		}
		if w.resumed && w.next > w.resumeAt {
			return w.resumedComplete()
		}
		msg, ok, behind := w.nextFor()
		switch {
		case ok:
			return msg
		case behind:
			w.resync()
			continue
		}
		if !w.progressDue() {
			return nil
		}
		sk := w.pr.skipped
		w.pr.skipped, w.pr.last = skipped{}, time.Now().UnixNano()
		w.sentType, w.sentCount = registrarv1.EndpointEvent_PROGRESS, 1
		return encoded(wire.EncodeProgress(r.view.VersionAt(sk.seq), sk.persisted))
	}
}

// nextFor takes the message w is to be sent next from the ring, advancing w's
// cursor past it and past the events of services w does not watch: the next
// event, or for a watcher that accepts batches the paced message of the events
// waiting (batch.go; nil while its last one is in flight). Without an event it
// reports whether w fell out of the ring. One read lock for all of it: a fan-out
// takes it once per watcher.
func (w *watcher) nextFor() (msg any, ok, behind bool) {
	w.r.view.Read(func(h view.Reader) { msg, ok, behind = w.nextIn(h) })
	return msg, ok, behind
}

// nextIn is nextFor, under the view's read lock.
func (w *watcher) nextIn(h view.Reader) (msg any, ok, behind bool) {
	for {
		ev, ok := h.At(w.next)
		if !ok {
			return nil, false, w.next <= h.Seq()
		}
		w.next++
		if !w.wants(ev) {
			w.pr.skipped = skipped{seq: ev.Seq, persisted: ev.Persisted}
			continue
		}
		w.pr.skipped = skipped{}
		if w.batches {
			return w.paced(h, ev), true, false
		}
		w.sentType, w.sentCount = registrarv1.EndpointEvent_EventType(ev.Type), 1
		return ev.Out, true, false
	}
}

// resync marks a watcher that fell out of the history ring for a full snapshot.
func (w *watcher) resync() {
	w.r.log.Info("watcher fell behind the history ring; resyncing with a full snapshot",
		"watcher", w.id, "node", w.node, "peer", w.peerString(), "next", w.next)
	w.r.m.resyncs.Inc()
	w.full = true
}

// resumedComplete ends a resumed replay: its SNAPSHOT_COMPLETE.
func (w *watcher) resumedComplete() any {
	w.resumed = false
	return w.complete(w.r.view.VersionAt(w.resumeAt), true)
}

// complete returns the SNAPSHOT_COMPLETE of a snapshot or a resumed replay at
// version at.
func (w *watcher) complete(at token.Version, resumed bool) any {
	persisted := min(w.r.view.Persisted(), at.Seq)
	w.sentType, w.sentCount = registrarv1.EndpointEvent_SNAPSHOT_COMPLETE, 1
	return encoded(wire.EncodeComplete(at, resumed, persisted, w.scope.id))
}

// takeSnapshot starts sending w the full state (of its services, if scoped).
func (w *watcher) takeSnapshot() {
	switch {
	case w.services == nil && w.zipped:
		w.snap = w.r.view.Snapshot().Compressed()
	case w.services == nil:
		w.snap = w.r.view.Snapshot()
	default: // scopes are small: never compressed
		w.snap = w.r.view.ScopedSnapshot(w.services)
	}
	w.chunk, w.full, w.resumed = 0, false, false
}

// snapshotPart returns the next chunk of w's snapshot, then its SNAPSHOT_COMPLETE,
// after which w continues from the snapshot's version.
func (w *watcher) snapshotPart() any {
	snap := w.snap
	if i := int(w.chunk); i < len(snap.Messages) {
		w.chunk++
		w.sentType, w.sentCount = registrarv1.EndpointEvent_FULL_SNAPSHOT, int32(snap.Items[i])
		return message(snap, i)
	}
	w.snap, w.next = nil, snap.At.Seq+1
	return w.complete(snap.At, false)
}
