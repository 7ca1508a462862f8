package registrar

import (
	"sync"

	"google.golang.org/grpc/mem"
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
// the transport's to free once it has written it, and its freeing (the
// watcher's Put, as the buffer's pool) lets the watcher send again. Snapshot
// parts are not paced (each already holds 64 KiB), nor are watchers that do not
// accept batches.

// batchBytes caps a BATCH message: large enough that a watcher that fell behind
// catches up in a few messages, small enough that one never holds a stream's
// flow-control window for long.
const batchBytes = 64 << 10

// sendPool holds the buffers of paced messages, in two sizes: one event, and a
// whole BATCH. gRPC tracks (and frees into their pool) only buffers of more than
// 1 KiB, so the smaller is 2 KiB. Its own pools clear every buffer they hand
// out, which paced messages, written over at once, do not need.
var sendPool sendBuffers

const smallBuffer = 2 << 10

type sendBuffers struct{ small, large sync.Pool }

// Get returns a buffer of n bytes.
func (p *sendBuffers) Get(n int) *[]byte {
	pool, size := &p.small, smallBuffer
	switch {
	case n > batchBytes: // one event larger than a batch: not pooled
		pool, size = nil, n
	case n > smallBuffer:
		pool, size = &p.large, batchBytes
	}
	if pool != nil {
		if b, ok := pool.Get().(*[]byte); ok {
			*b = (*b)[:n]
			return b
		}
	}
	b := make([]byte, n, size)
	return &b
}

// Put takes back a buffer Get returned.
func (p *sendBuffers) Put(b *[]byte) {
	switch cap(*b) {
	case smallBuffer:
		p.small.Put(b)
	case batchBytes:
		p.large.Put(b)
	}
}

// In-flight states of a paced watcher's last change message.
const (
	landed  = iota // written by the transport, or none sent
	flying         // in the transport's queue
	waiting        // in the transport's queue, and the watcher has more to send
)

// takeChanges returns first, which nextFor just took for w, and the events after
// it waiting for w, as one paced message: first alone, or all of them as a
// BATCH, advancing w's cursor past them.
func (s *state) takeChanges(w *watcher, first ringEvent) any {
	s.mu.RLock()
	defer s.mu.RUnlock()
	size, end := s.batchEnd(w, first)
	if end == w.next {
		w.sentType, w.sentCount = first.typ, 1
		buf := sendPool.Get(len(first.msg.bytes()))
		copy(*buf, first.msg.bytes())
		return w.paced(buf)
	}
	return s.batch(w, first, size, end)
}

// batchEnd returns the size of a BATCH of first and the events after it waiting
// for w, and the sequence after its last event. A resumed replay's batch ends
// at the replay's end, which its SNAPSHOT_COMPLETE follows. Callers hold s.mu.
func (s *state) batchEnd(w *watcher, first ringEvent) (size int, end uint64) {
	size, end = batchHeaderSize+batchItemSize(first.msg.bytes()), w.next
	for seq := w.next; !w.resumed || seq <= w.resumeAt; seq++ {
		ev, ok := s.eventAt(seq)
		if !ok {
			break
		}
		if !w.wants(ev) {
			continue
		}
		n := batchItemSize(ev.msg.bytes())
		if size+n > batchBytes {
			break
		}
		size, end = size+n, seq+1
	}
	return size, end
}

// batch builds the BATCH batchEnd measured and moves w's cursor to its end.
// Callers hold s.mu.
func (s *state) batch(w *watcher, first ringEvent, size int, end uint64) any {
	buf := sendPool.Get(size)
	out := appendBatchHeader((*buf)[:0])
	out = w.appendBatched(out, first)
	for seq := w.next; seq < end; seq++ {
		if ev, _ := s.eventAt(seq); w.wants(ev) {
			out = w.appendBatched(out, ev)
		}
	}
	*buf = out
	// The batch ends with an event w was sent: nothing skipped is left to report.
	w.next, w.pr.skipped = end, skipped{}
	w.sentCount = 0 // its events are counted above, by type
	return w.paced(buf)
}

// appendBatched appends ev to a BATCH for w, counting it as broadcast. A batch's
// events are counted when it is built, by their own types: the stream then takes
// the batch or ends.
func (w *watcher) appendBatched(out []byte, ev ringEvent) []byte {
	w.r.m.broadcast[ev.typ].Inc()
	return appendBatchItem(out, ev.msg.bytes())
}

// paced returns msg, a buffer of sendPool, as a message whose buffer the
// transport frees into w (Put) once it has written it; until then w sends no
// other change.
func (w *watcher) paced(msg *[]byte) any {
	b := mem.NewBuffer(msg, w)
	if _, untracked := b.(mem.SliceBuffer); !untracked {
		w.flight.Store(flying)
	}
	return b // an interface already: no allocation for the any
}

// inFlight reports whether w's last change message is still in the transport's
// queue; if so, its landing schedules w.
func (w *watcher) inFlight() bool {
	return w.flight.CompareAndSwap(flying, waiting) || w.flight.Load() == waiting
}

// Put is called by the transport when it has written a paced message of w: w may
// send its next change, and is scheduled if one was waiting.
func (w *watcher) Put(buf *[]byte) {
	sendPool.Put(buf)
	if w.flight.Swap(landed) == waiting {
		w.schedule()
	}
}

// Get makes w a mem.BufferPool; gRPC only ever puts buffers back into it.
func (w *watcher) Get(n int) *[]byte { return sendPool.Get(n) }
