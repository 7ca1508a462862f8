package registrar

import (
	"sync"

	"google.golang.org/grpc/mem"

	"github.com/switchboard-mesh/switchboard/registrar/internal/view"
)

// watchSet is the open watch streams, each signalled when the view appends
// events.
type watchSet struct {
	mu       sync.Mutex
	watching []*watcher
	toQueue  []*watcher // signalAll's, kept for the next
}

// signalAll signals every watcher: a watcher that found nothing new before the
// signal looks again. Scoped watchers too: they report skipped changes as PROGRESS.
// The view calls it after each change that appended events (view.Config.Changed).
func (r *Registrar) signalAll() {
	ws := &r.watching
	ws.mu.Lock()
	queue := ws.toQueue[:0]
	for _, w := range ws.watching {
		if w.mark() {
			queue = append(queue, w)
		}
	}
	if len(queue) > 0 {
		r.senders.push(queue...) // one lock for all of them
	}
	clear(queue)
	ws.toQueue = queue
	ws.mu.Unlock()
}

// stalled counts the watchers whose send under way began in period last or
// earlier (Registrar.period).
func (ws *watchSet) stalled(last int64) int {
	n := 0
	ws.mu.Lock()
	for _, w := range ws.watching {
		if at := w.sending.Load(); at != 0 && at <= last {
			n++
		}
	}
	ws.mu.Unlock()
	return n
}

func (ws *watchSet) add(w *watcher) {
	ws.mu.Lock()
	w.slot = int32(len(ws.watching))
	ws.watching = append(ws.watching, w)
	ws.mu.Unlock()
}

func (ws *watchSet) remove(w *watcher) {
	ws.mu.Lock()
	last := len(ws.watching) - 1
	moved := ws.watching[last]
	ws.watching[w.slot], moved.slot = moved, w.slot
	ws.watching[last] = nil
	ws.watching = ws.watching[:last]
	ws.mu.Unlock()
}

// The view holds events and snapshots as plain bytes; what the codec sends is
// made of them once, as the view creates them (view.Config's hooks), and shared
// by every watcher sent them: a send wraps nothing.

// wrapEvent is an event as every watcher is sent it: its buffer list, made once.
func wrapEvent(msg []byte) any { return share(msg) }

// wrapPart is a sealed part of snapshot messages as the transport takes it.
func wrapPart(part []byte) any { return mem.Buffer(mem.SliceBuffer(part)) }

// snapMessages are a snapshot's FULL_SNAPSHOT messages as the codec sends them:
// each a run of its parts' buffers, without a copy.
type snapMessages []shared

// wrapSnapshot makes a snapshot's messages, once per snapshot: one buffer list
// for all of its parts, of which each message is a run.
func wrapSnapshot(snap *view.Snapshot) any {
	n := 0
	for _, m := range snap.Messages {
		n += len(m)
	}
	bufs := make(mem.BufferSlice, 0, n)
	msgs := make(snapMessages, len(snap.Messages))
	for i, m := range snap.Messages {
		start := len(bufs)
		for _, p := range m {
			bufs = append(bufs, p.Out.(mem.Buffer))
		}
		msgs[i].data = bufs[start:len(bufs):len(bufs)]
	}
	return msgs
}

// message returns snap's i-th message as the codec sends it.
func message(snap *view.Snapshot, i int) *shared { return &snap.Out.(snapMessages)[i] }
