package hub

import (
	"google.golang.org/grpc/mem"

	"github.com/switchboard-mesh/switchboard/internal/wire"
	"github.com/switchboard-mesh/switchboard/registrar/internal/view"
)

// A watcher that accepts batches (WatchEndpointsRequest.accept_batches) is sent
// the change events waiting for it as one BATCH message instead of one message
// each. What a stream message costs is mostly gRPC's (the send, the transport's
// framing, the client's frame parse, wake-up and receive), not its bytes, so a
// registrar whose watchers fall behind sends fewer, larger messages and catches
// up instead of falling further behind. An event waiting alone is sent on its
// own: batching never waits for a second event.
//
// Events wait in the ring only if the watcher is paced: SendMsg returns as soon
// as gRPC's transport has queued the message (up to 64 KiB per stream), so a
// sender that sent every event at once would always find one, and the backlog
// would pile up message by message in the transport instead. So such a
// watcher has at most one change message in flight: the message's buffer is
// the transport's to free once it has written it, and its freeing (Put of the
// buffer's mem.BufferPool, which is the watcher) lets the watcher send again.
// An event sent alone is the ring's own bytes, tracked without a copy (one in
// trackEvery); a BATCH is built in a buffer of batchBuffers. Snapshot parts are not paced (each
// already holds 64 KiB), nor are watchers that do not accept batches.

// BatchBytes caps a BATCH message: large enough that a watcher that fell behind
// catches up in a few messages, small enough that one never holds a stream's
// flow-control window for long.
const BatchBytes = 64 << 10

// TrackedCap is the least capacity of a buffer whose writing gRPC reports (it
// neither pools nor tracks buffers of up to 1 KiB): every change event's bytes
// have it (view.Config.EventCap), so that a paced watcher sends an event alone as it is,
// without a copy.
const TrackedCap = 1<<10 + 1

// trackEvery: of the events sent alone, only every trackEvery-th (by sequence)
// is tracked; every BATCH is. Tracking costs a send about a microsecond (gRPC's
// buffer object, its reference counts, the callback), which a fan-out to every
// watcher pays once per watcher; a watcher whose transport is behind still has
// one of its next few messages held up, and from then on sends batches, each
// tracked.
const trackEvery = 4

// batchBuffers holds the buffers of BATCH messages, in sizes of powers of two up
// to BatchBytes: a batch takes the smallest that holds it (tracked, so above 1
// KiB). A fan-out's batches are mostly a few hundred bytes, and buffers of 64 KiB
// each would be most of what the registrar allocates while it fans out.
var batchBuffers = mem.NewTieredBufferPool(2<<10, 4<<10, 8<<10, 16<<10, 32<<10, BatchBytes)

// In-flight states of a paced watcher's last change message.
const (
	landed  = iota // written by the transport, or none sent
	flying         // in the transport's queue
	waiting        // in the transport's queue, and the watcher has more to send
)

// paced returns, unless w's last change message is still in flight, ev (which
// nextFor just took for w) and the events after it waiting for w, as one paced
// message. While one is in flight it returns nil and leaves ev for later: the
// landing schedules w. The check comes only once a change is waiting, so that a
// watcher with nothing more to send is not woken by every landing. h is the
// view's read lock, held.
func (w *Watcher) paced(h view.Reader, ev view.Event) any {
	if w.inFlight() {
		w.next = ev.Seq
		return nil
	}
	return w.takeChanges(h, ev)
}

// takeChanges returns first, which nextFor just took for w, and the events after
// it waiting for w, as one paced message: first alone, or all of them as a
// BATCH, advancing w's cursor past them. h is the view's read lock, held.
func (w *Watcher) takeChanges(h view.Reader, first view.Event) any {
	end, size := w.batchEnd(h, first)
	if end == w.next {
		w.sentType, w.sentCount = first.Type, 1
		if first.Seq%trackEvery != 0 {
			return first.Out
		}
		return w.track(w.h.cfg.Raw(first.Out), w) // shared: nothing to take back
	}
	return w.batch(h, first, end, size)
}

// batchEnd returns the sequence after the last event of a BATCH of first and
// the events after it waiting for w, within BatchBytes, and the BATCH's size. A
// resumed replay's batch ends at the replay's end, which its SNAPSHOT_COMPLETE
// follows. h is the view's read lock, held.
func (w *Watcher) batchEnd(h view.Reader, first view.Event) (end uint64, size int) {
	size, end = wire.BatchHeaderSize+wire.BatchItemSize(first.Msg), w.next
	for seq := w.next; !w.resumed || seq <= w.resumeAt; seq++ {
		ev, ok := h.At(seq)
		if !ok {
			break
		}
		if !w.wants(ev) {
			continue
		}
		n := wire.BatchItemSize(ev.Msg)
		if size+n > BatchBytes {
			break
		}
		size, end = size+n, seq+1
	}
	return end, size
}

// batch builds the BATCH of size bytes batchEnd measured and moves w's cursor to
// its end. h is the view's read lock, held.
func (w *Watcher) batch(h view.Reader, first view.Event, end uint64, size int) any {
	buf := batchBuffers.Get(max(size, TrackedCap))
	out := wire.AppendBatchHeader((*buf)[:0])
	out = w.appendBatched(out, first)
	for seq := w.next; seq < end; seq++ {
		if ev, _ := h.At(seq); w.wants(ev) {
			out = w.appendBatched(out, ev)
		}
	}
	*buf = out
	// The batch ends with an event w was sent: nothing skipped is left to report.
	w.next, w.pr.skipped = end, skipped{}
	w.sentCount = 0 // its events are counted above, by type
	return w.track(buf, (*batchLanding)(w))
}

// appendBatched appends ev to a BATCH for w, counting it as broadcast. A batch's
// events are counted when it is built, by their own types: the stream then takes
// the batch or ends.
func (w *Watcher) appendBatched(out []byte, ev view.Event) []byte {
	w.h.cfg.Broadcast[ev.Type].Inc()
	return wire.AppendBatchItem(out, ev.Msg)
}

// track returns msg as a message whose buffer the transport frees into pool
// (which tells w) once it has written it; until then w sends no other change.
func (w *Watcher) track(msg *[]byte, pool mem.BufferPool) any {
	b := mem.NewBuffer(msg, pool)
	if _, untracked := b.(mem.SliceBuffer); !untracked {
		w.flight.Store(flying)
	}
	return b // an interface already: no allocation for the any
}

// inFlight reports whether w's last change message is still in the transport's
// queue; if so, its landing schedules w.
func (w *Watcher) inFlight() bool {
	return w.flight.CompareAndSwap(flying, waiting) || w.flight.Load() == waiting
}

// landed notes that the transport has written w's paced message: w may send
// its next change, and is scheduled if one was waiting.
func (w *Watcher) landed() {
	if w.flight.Swap(landed) == waiting {
		w.schedule()
	}
}

// Put is called by the transport when it has written a ring event w sent alone
// (w is that buffer's mem.BufferPool): the bytes are the ring's, not taken back.
func (w *Watcher) Put(*[]byte) { w.landed() }

// Get makes w a mem.BufferPool; gRPC only ever puts buffers back into it.
func (w *Watcher) Get(n int) *[]byte {
	b := make([]byte, n)
	return &b
}

// batchLanding is w as the mem.BufferPool of its BATCH messages' buffers.
type batchLanding Watcher

// Put takes back a BATCH's buffer once the transport has written it.
func (b *batchLanding) Put(buf *[]byte) {
	batchBuffers.Put(buf)
	(*Watcher)(b).landed()
}

// Get makes batchLanding a mem.BufferPool; gRPC only ever puts buffers back.
func (b *batchLanding) Get(n int) *[]byte { return (*Watcher)(b).Get(n) }
