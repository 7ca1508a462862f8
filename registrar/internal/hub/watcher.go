package hub

import (
	"context"
	"net"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	"github.com/switchboard-mesh/switchboard/internal/wire"
	"github.com/switchboard-mesh/switchboard/registrar/internal/view"
	"github.com/switchboard-mesh/switchboard/registrar/token"
)

// Watcher is one agent's stream. Watchers share the history ring and keep only a
// cursor (the next sequence to send), so an idle watcher costs a few words, one
// event is encoded once for all of them, and a slow one holds up nobody: when its
// cursor falls out of the ring it is resynced with a full snapshot.
//
// An idle watcher is its stream's handler goroutine, waiting, plus this struct;
// the work — receiving the request, sending — is done by the hub's senders, so
// that the waiting goroutine keeps its smallest stack. Its fields are ordered to
// pack into 224 bytes, a size class of the allocator (TestWatcherStaysInItsSizeClass).
type Watcher struct {
	h      *Hub
	Stream grpc.ServerStream
	// Ctx is the stream's context, or one derived from it (a scoped stream's,
	// which its request reader cancels).
	Ctx  context.Context
	Peer net.Addr // nil if unknown
	Node string
	Scope
	// Rescope delivers a scoped stream's new sets of services; nil when the stream
	// cannot change its set.
	Rescope chan Scope
	done    chan error     // the error that ended the stream, from its sender
	snap    *view.Snapshot // the snapshot being sent, nil when none
	ID      uint64
	next    uint64 // the sequence of the next event to send
	// resumeAt, while resumed, is the version its SNAPSHOT_COMPLETE carries.
	resumeAt uint64
	// cursor is next as the sender left it after a send, or when w was
	// current; 0 until w's first snapshot is complete. Status reads it
	// (Cursor): next is the sender's alone.
	cursor atomic.Uint64
	// Member is w's run state (idle, queued, rerun or finished), its slot, the
	// period its send under way began in.
	Member
	pr     progress
	chunk  int32         // the next of snap's chunks to send
	wake   atomic.Uint32 // WakeEnded, WakeRescope: what woken must look at
	flight atomic.Int32  // landed, flying or waiting: a paced message (batch.go)
	// sentType and sentCount are what the message last handed to the stream counts
	// as in registrar_event_broadcast_total, once sent.
	sentType  wire.EventType
	sentCount int32
	Exact     bool // a WatchEndpointsScoped stream
	opening   bool // Config.Open has not run yet
	open      bool // Start has run
	full      bool // a full snapshot is to be taken
	resumed   bool // replaying the ring from the client's token
	Batches   bool // the client accepts BATCH events (batch.go)
	Zipped    bool // the client accepts compressed snapshots (view's compress.go)
}

// PeerString is the peer's address for logs.
func (w *Watcher) PeerString() string {
	if w.Peer == nil {
		return ""
	}
	return w.Peer.String()
}

// Scope is the set of services a watcher receives: nil Services means all of
// them. ID is the client's name for the set, echoed when a snapshot of it is
// complete.
type Scope struct {
	Services map[string]struct{}
	ID       uint64
}

func (w *Watcher) wants(ev view.Event) bool {
	if w.Services == nil || ev.Service == "" {
		return true
	}
	_, ok := w.Services[ev.Service]
	return ok
}

// Resumed reports whether w's stream began by replaying the ring from the
// client's token (set by Start).
func (w *Watcher) Resumed() bool { return w.resumed }

// Cursor is the sequence of the next event w is to be sent, as its sender left
// it after a send, or when w was current; 0 until w's first snapshot is
// complete. Other goroutines than its sender may read it.
func (w *Watcher) Cursor() uint64 { return w.cursor.Load() }

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
func (w *Watcher) progressDue() bool {
	p := &w.pr
	if p.skipped.seq == 0 {
		return false // the common case, on every watcher's every wake: no clock read
	}
	left := w.h.cfg.ProgressInterval - time.Duration(time.Now().UnixNano()-p.last)
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

// Start sets w's cursor from the agent's last_version, once Config.Open has
// filled w in: w is open from then on.
func (w *Watcher) Start(lastVersion string) {
	w.open = true
	st, err := w.h.cfg.View.Since(lastVersion)
	if st.Full && lastVersion != "" {
		w.h.cfg.Log.Debug("resume token not usable here; sending a full snapshot", "last_version", lastVersion, "err", err)
	}
	w.full, w.next, w.resumeAt, w.resumed = st.Full, st.Next, st.CompleteAt, st.Resumed
}

// close removes w from the hub once its stream has ended, and reports whether
// Start had run.
func (w *Watcher) close() (opened bool) {
	w.h.remove(w)
	if !w.open {
		return false
	}
	if w.pr.timer != nil {
		w.pr.timer.Stop()
	}
	return true
}

// sent counts the message pending returned last, which the stream took (a
// BATCH's events were counted when it was built).
func (w *Watcher) sent() {
	if w.sentCount > 0 {
		w.h.cfg.Broadcast[w.sentType].Add(float64(w.sentCount))
	}
}

// Wake flags: what woken must look at besides the ring. A fan-out wakes every
// watcher for every event; looking at each stream's context (a chain of gRPC's
// contexts, a cache miss per link) and rescope channel instead was a tenth of
// the registrar's CPU at 10,000 watchers. Whoever ends a stream's context or
// sends a new set of services sets the flag before scheduling the watcher.
const (
	WakeEnded   = 1 << iota // the stream's context may have ended
	WakeRescope             // a new set of services may be waiting in Rescope
)

// WakeFor sets flag f and schedules w, so that its next wake looks.
func (w *Watcher) WakeFor(f uint32) {
	w.wake.Or(f)
	w.schedule()
}

// woken is what a watcher does on waking before looking for what to send: end
// when its stream or the registrar does, take a new set of services.
func (w *Watcher) woken() error {
	select {
	case <-w.h.cfg.Closing:
		return w.h.cfg.ErrClosing
	default:
	}
	f := w.wake.Load()
	if f == 0 {
		return nil
	}
	if f&WakeEnded != 0 {
		if w.Ctx.Err() != nil {
			return ended(w.Ctx)
		}
		// A scoped stream's w.ctx is derived from the stream's: a context closes
		// its Done before it cancels its children, so the handler can see the
		// stream's end, and flag it, before w.ctx has ended.
		if sctx := w.Stream.Context(); sctx.Err() != nil {
			return ended(sctx)
		}
	}
	if f&WakeRescope != 0 {
		w.wake.And(^uint32(WakeRescope)) // before the receive: a later set flags again
		select {
		case sc := <-w.Rescope:
			// A new set: a snapshot of it replaces what the client holds.
			w.Scope, w.full, w.resumed, w.snap = sc, true, false, nil
			w.pr.skipped = skipped{}
			if w.h.cfg.Rescoped != nil {
				w.h.cfg.Rescoped(w)
			}
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
func (w *Watcher) pending() any {
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
		w.sentType, w.sentCount = wire.Progress, 1
		return w.h.cfg.Encoded(wire.EncodeProgress(w.h.cfg.View.VersionAt(sk.seq), sk.persisted))
	}
}

// nextFor takes the message w is to be sent next from the ring, advancing w's
// cursor past it and past the events of services w does not watch: the next
// event, or for a watcher that accepts batches the paced message of the events
// waiting (batch.go; nil while its last one is in flight). Without an event it
// reports whether w fell out of the ring. One read lock for all of it: a fan-out
// takes it once per watcher.
func (w *Watcher) nextFor() (msg any, ok, behind bool) {
	w.h.cfg.View.Read(func(h view.Reader) { msg, ok, behind = w.nextIn(h) })
	return msg, ok, behind
}

// nextIn is nextFor, under the view's read lock.
func (w *Watcher) nextIn(h view.Reader) (msg any, ok, behind bool) {
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
		if w.Batches {
			return w.paced(h, ev), true, false
		}
		w.sentType, w.sentCount = ev.Type, 1
		return ev.Out, true, false
	}
}

// resync marks a watcher that fell out of the history ring for a full snapshot.
func (w *Watcher) resync() {
	w.h.cfg.Log.Info("watcher fell behind the history ring; resyncing with a full snapshot",
		"watcher", w.ID, "node", w.Node, "peer", w.PeerString(), "next", w.next)
	w.h.cfg.Resyncs.Inc()
	w.full = true
}

// resumedComplete ends a resumed replay: its SNAPSHOT_COMPLETE.
func (w *Watcher) resumedComplete() any {
	w.resumed = false
	return w.complete(w.h.cfg.View.VersionAt(w.resumeAt), true)
}

// complete returns the SNAPSHOT_COMPLETE of a snapshot or a resumed replay at
// version at.
func (w *Watcher) complete(at token.Version, resumed bool) any {
	persisted := min(w.h.cfg.View.Persisted(), at.Seq)
	w.sentType, w.sentCount = wire.SnapshotComplete, 1
	return w.h.cfg.Encoded(wire.EncodeComplete(at, resumed, persisted, w.Scope.ID))
}

// takeSnapshot starts sending w the full state (of its services, if scoped).
func (w *Watcher) takeSnapshot() {
	switch {
	case w.Services == nil && w.Zipped:
		w.snap = w.h.cfg.View.Snapshot().Compressed()
	case w.Services == nil:
		w.snap = w.h.cfg.View.Snapshot()
	default: // scopes are small: never compressed
		w.snap = w.h.cfg.View.ScopedSnapshot(w.Services)
	}
	w.chunk, w.full, w.resumed = 0, false, false
}

// snapshotPart returns the next chunk of w's snapshot, then its SNAPSHOT_COMPLETE,
// after which w continues from the snapshot's version.
func (w *Watcher) snapshotPart() any {
	snap := w.snap
	if i := int(w.chunk); i < snap.Len() {
		w.chunk++
		w.sentType, w.sentCount = wire.FullSnapshot, int32(snap.Items[i])
		return w.h.cfg.Message(snap, i)
	}
	w.snap, w.next = nil, snap.At.Seq+1
	return w.complete(snap.At, false)
}

// schedule makes sure w is run once more after this call.
func (w *Watcher) schedule() { w.h.schedule(w) }

// ended hands the handler the error that ended w's stream, from its sender.
func (w *Watcher) ended(err error) { w.done <- err }

// run opens w's stream if it is new (Config.Open) and sends w what it is
// missing; it returns the error that ends the stream.
func (w *Watcher) run() error {
	if w.opening {
		w.opening = false
		if err := w.h.cfg.Open(w); err != nil {
			return err
		}
	}
	// Not before every message (the stream's context is a chain of gRPC's values
	// over a mutex): at the start, and again once something scheduled w meanwhile.
	if err := w.woken(); err != nil {
		return err
	}
	for {
		if w.State() == Rerun {
			if err := w.woken(); err != nil {
				return err
			}
		}
		msg := w.pending()
		if msg == nil {
			w.cursor.Store(w.next) // current: for Status (Cursor)
			return nil
		}
		w.BeginSend()
		err := w.Stream.SendMsg(msg)
		w.EndSend()
		if err != nil {
			return err
		}
		w.sent()
		w.cursor.Store(w.next)
	}
}
