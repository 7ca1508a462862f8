package hub

import (
	"sync"
	"sync/atomic"
	"time"
)

// Senders started, and how often stalls are looked for (see the package comment).
const (
	BusySenders = 16
	MaxSenders  = 4096
	StuckAfter  = 100 * time.Millisecond
)

// Watcher is a watch stream's work, as a sender runs it.
type Watcher interface {
	// Step sends the watcher what it is missing, until it is current; its error
	// ends the stream.
	Step() error
	// Finish is told the error that ended the stream, once, after its last Step.
	Finish(err error)
}

// Member is a watcher's part in the hub, embedded in the watcher.
type Member struct {
	run  atomic.Int32 // a State
	slot int32        // its index in Hub.watching
	// sending is the period the send under way began in (Hub.period), 0 if none.
	sending atomic.Int64
}

// job is a watcher as the hub keeps it: its member, for the run state, without
// a call through the interface.
type job struct {
	m *Member
	w Watcher
}

// Hub is the set of open watchers and the senders that run them.
type Hub struct {
	pool pool

	mu       sync.Mutex
	watching []job
	toQueue  []job // SignalAll's, kept for the next

	// period counts the periods of StuckAfter, from 1: a send notes the one it
	// began in (Member.sending). A load, where reading the clock on every send
	// of a fan-out cost 2% of it.
	period atomic.Int64
	// periodAt is when the current period began, Unix ns: SendClock turns a
	// send's period into a time with it.
	periodAt atomic.Int64
}

// New returns a hub without watchers.
func New() *Hub {
	h := &Hub{}
	h.period.Store(1) // 0 is no send under way
	h.periodAt.Store(time.Now().UnixNano())
	return h
}

// Open adds a new watcher and queues it: its first run opens its stream.
func (h *Hub) Open(m *Member, w Watcher) {
	m.move(Idle, Queued)
	h.mu.Lock()
	m.slot = int32(len(h.watching))
	h.watching = append(h.watching, job{m, w})
	h.mu.Unlock()
	h.pool.push(job{m, w})
}

// Remove takes a watcher out once its stream has ended.
func (h *Hub) Remove(m *Member) {
	h.mu.Lock()
	last := len(h.watching) - 1
	moved := h.watching[last]
	h.watching[m.slot], moved.m.slot = moved, m.slot
	h.watching[last] = job{}
	h.watching = h.watching[:last]
	h.mu.Unlock()
}

// Schedule makes sure w is run once more after this call.
func (h *Hub) Schedule(m *Member, w Watcher) {
	if m.mark() {
		h.pool.push(job{m, w})
	}
}

// SignalAll schedules every watcher: a watcher that found nothing new before the
// signal looks again. Scoped watchers too: they report skipped changes as
// PROGRESS.
func (h *Hub) SignalAll() {
	h.mu.Lock()
	queue := h.toQueue[:0]
	for _, j := range h.watching {
		if j.m.mark() {
			queue = append(queue, j)
		}
	}
	if len(queue) > 0 {
		h.pool.push(queue...) // one lock for all of them
	}
	clear(queue)
	h.toQueue = queue
	h.mu.Unlock()
}

// Tick starts a new period of StuckAfter, and senders for the work that waits
// while stalled sends hold senders. The registrar calls it every StuckAfter.
func (h *Hub) Tick() {
	// Sends that began two periods ago or earlier have been under way for a
	// whole period at least.
	p := h.period.Add(1)
	h.periodAt.Store(time.Now().UnixNano())
	h.pool.unstick(h.stalled(p - 2))
}

// stalled counts the watchers whose send under way began in period last or
// earlier.
func (h *Hub) stalled(last int64) int {
	n := 0
	h.mu.Lock()
	for _, j := range h.watching {
		if at := j.m.sending.Load(); at != 0 && at <= last {
			n++
		}
	}
	h.mu.Unlock()
	return n
}

// BeginSend notes that m's watcher begins a send (or a receive) that a client
// can block.
func (h *Hub) BeginSend(m *Member) { m.sending.Store(h.period.Load()) }

// EndSend notes that the send BeginSend noted is over.
func (h *Hub) EndSend(m *Member) { m.sending.Store(0) }

// SendingSince is the period the send under way began in, 0 if none
// (SendClock turns it into a time).
func (m *Member) SendingSince() int64 { return m.sending.Load() }

// SendClock returns a function that turns the period a send began in
// (Member.SendingSince) into the latest time it can have begun: the start of the
// next period, or now for a send of the current one; zero for none.
func (h *Hub) SendClock() func(period int64) time.Time {
	cur := h.period.Load()
	at := h.periodAt.Load()
	now := time.Now()
	return func(p int64) time.Time {
		if p == 0 {
			return time.Time{}
		}
		if p >= cur {
			return now
		}
		return time.Unix(0, at-(cur-p-1)*int64(StuckAfter))
	}
}

// State is m's run state now.
func (m *Member) State() State { return State(m.run.Load()) }

// Rescheduled reports whether something scheduled m's watcher while it runs: it
// looks again at what it skips between sends (Watcher.Step).
func (m *Member) Rescheduled() bool { return m.State() == Rerun }

// mark notes that m's watcher is to be run once more, and reports whether the
// caller must queue it (it was idle).
func (m *Member) mark() bool {
	for {
		switch st := m.State(); st {
		case Idle:
			if m.move(Idle, Queued) {
				return true
			}
		case Queued:
			if m.move(Queued, Rerun) {
				return false
			}
		default: // rerun, finished
			return false
		}
	}
}

// drain runs j's watcher until it is current or its stream has ended, then
// releases it, running it again if it was scheduled meanwhile.
func drain(j job) {
	for {
		if err := j.w.Step(); err != nil {
			j.m.finish()
			j.w.Finish(err)
			return
		}
		if j.m.move(Queued, Idle) {
			return
		}
		j.m.move(Rerun, Queued) // it was rerun: look again
	}
}

// finish moves m, being run, to Finished: from Queued, or from Rerun if
// something scheduled it meanwhile (only its sender moves it from either).
func (m *Member) finish() {
	for !m.move(m.State(), Finished) {
	}
}
