package registrar

import (
	"sync"
	"time"
)

// A watch stream's handler goroutine only waits (service.go, watchStream): the
// receiving of its first request and all sending are done by sender goroutines,
// for the watchers that have something to do. gRPC's receive and send paths are
// deep enough that a goroutine that has run them keeps an 8 KiB stack; one that
// only waits keeps 4 KiB. So an idle watcher costs a 4 KiB stack, and the 8 KiB
// ones are the senders', which exist only while there is work: a sender runs
// queued watchers until the queue is empty, then ends.
//
// A watcher is scheduled (schedule) when it may have something to do: its stream
// opened, an event was appended, its set of services changed, a PROGRESS fell
// due, its stream or the registrar ended. A sender runs it until it is current or
// its stream has ended; one sender at a time runs a watcher. A sender starts when
// a watcher is queued while every sender is busy, up to busySenders: a few
// senders keep two cores busy, and each one started and ended leaves stack slots
// and a goroutine record behind. A send to a client that does not read blocks its
// sender; every stuckAfter the registrar counts the sends blocked longer than that
// (state.stalled) and starts a sender for each, up to maxSenders, so stalled
// clients hold up only their own watchers.
const (
	busySenders = 16
	maxSenders  = 4096
	stuckAfter  = 100 * time.Millisecond
)

// Watcher run states.
const (
	idle     = iota // nothing to do, not queued
	queued          // queued or being run
	rerun           // being run, and scheduled again meanwhile: run it once more
	finished        // its stream ended: never run again
)

type senders struct {
	mu      sync.Mutex
	queue   []*watcher
	running int // senders started and not ended
	free    int // of those, the ones not running a watcher
}

// schedule makes sure w is run once more after this call.
func (w *watcher) schedule() {
	if w.mark() {
		w.r.senders.push(w)
	}
}

// mark notes that w is to be run once more, and reports whether the caller must
// queue it (it was idle).
func (w *watcher) mark() bool {
	for {
		switch st := w.run.Load(); st {
		case idle:
			if w.run.CompareAndSwap(idle, queued) {
				return true
			}
		case queued:
			if w.run.CompareAndSwap(queued, rerun) {
				return false
			}
		default: // rerun, finished
			return false
		}
	}
}

func (p *senders) push(ws ...*watcher) {
	p.mu.Lock()
	p.queue = append(p.queue, ws...)
	// Start senders for the work, one per watcher queued, while every one is busy.
	n := min(len(ws)-p.free, busySenders-p.running)
	p.start(n)
}

// unstick starts senders for work that waits while stalled sends hold senders:
// up to busySenders senders not stalled.
func (p *senders) unstick(stalled int) {
	p.mu.Lock()
	n := 0
	if p.free == 0 {
		n = min(len(p.queue), busySenders+stalled-p.running, maxSenders-p.running)
	}
	p.start(n)
}

// start unlocks p, having started n senders.
func (p *senders) start(n int) {
	n = max(n, 0)
	p.running += n
	p.free += n
	p.mu.Unlock()
	for range n {
		go p.work()
	}
}

// work is a sender: it runs queued watchers until there are none.
func (p *senders) work() {
	p.mu.Lock()
	for len(p.queue) > 0 {
		w := p.queue[0]
		p.queue[0] = nil
		p.queue = p.queue[1:]
		if len(p.queue) == 0 {
			p.queue = nil // let a long queue's array go
		}
		p.free--
		p.mu.Unlock()
		w.drain()
		p.mu.Lock()
		p.free++
	}
	p.running--
	p.free--
	p.mu.Unlock()
}

// drain runs w until it is current or its stream has ended, then releases it,
// running it again if it was scheduled meanwhile.
func (w *watcher) drain() {
	for {
		if err := w.step(); err != nil {
			w.run.Store(finished)
			w.done <- err
			return
		}
		if w.run.CompareAndSwap(queued, idle) {
			return
		}
		w.run.Store(queued) // it was rerun: look again
	}
}

// step opens w's stream if it is new and sends w what it is missing; it returns
// the error that ends the stream.
func (w *watcher) step() error {
	if w.opening {
		w.opening = false
		if err := w.openStream(); err != nil {
			return err
		}
	}
	// Not before every message (the stream's context is a chain of gRPC's values
	// over a mutex): at the start, and again once something scheduled w meanwhile.
	if err := w.woken(); err != nil {
		return err
	}
	for {
		if w.run.Load() == rerun {
			if err := w.woken(); err != nil {
				return err
			}
		}
		msg := w.pending()
		if msg == nil {
			w.cursor.Store(w.next) // current: for Status (inspect.go)
			return nil
		}
		w.sending.Store(w.r.period.Load())
		err := w.stream.SendMsg(msg)
		w.sending.Store(0)
		if err != nil {
			return err
		}
		w.sent()
		w.cursor.Store(w.next)
	}
}
