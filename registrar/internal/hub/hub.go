package hub

import (
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchboard-mesh/switchboard/registrar/internal/view"
)

// Senders started, and how often stalls are looked for (see the package comment).
const (
	BusySenders = 16
	MaxSenders  = 4096
	StuckAfter  = 100 * time.Millisecond
)

// runner is what a sender runs: a *Watcher (or a test's stand-in), with its
// Member embedded. The hub's scheduling is generic over it, so that its queues
// hold one pointer a watcher and call no method through an interface.
type runner interface {
	// run sends the watcher what it is missing, until it is current; its error
	// ends the stream.
	run() error
	// ended is told the error that ended the stream, once, after its last run.
	ended(err error)
	member() *Member
}

// Member is a watcher's run state and its place in the hub.
type Member struct {
	st   atomic.Int32 // a State
	slot int32        // its index in the hub's set of watchers
	// sending is the period the send under way began in (sched.period), 0 if
	// none.
	sending atomic.Int64
}

func (m *Member) member() *Member { return m }

// Config is what a Hub is made with.
type Config struct {
	// View is what the watchers are sent.
	View *view.View
	// ProgressInterval is the least time between two PROGRESS events of a scoped
	// watcher.
	ProgressInterval time.Duration
	// Closing is closed at shutdown: every watch stream ends, with ErrClosing.
	Closing    <-chan struct{}
	ErrClosing error
	Log        *slog.Logger
	// Broadcast counts the events sent, by type; Resyncs the watchers that fell
	// out of the history ring.
	Broadcast []prometheus.Counter
	Resyncs   prometheus.Counter
	// The messages as the server's codec sends them. Encoded is a message of one
	// watcher's (a SNAPSHOT_COMPLETE, a PROGRESS); Message is message i of a
	// snapshot, as made once per snapshot (view.Snapshot.Out); Raw is the bytes
	// of a ring event's message (view.Event.Out), for a paced send of it as it is.
	Encoded func(msg []byte) any
	Message func(snap *view.Snapshot, i int) any
	Raw     func(event any) *[]byte
	// Open receives a new stream's first request on a sender, fills the watcher
	// in and Starts it; its error ends the stream.
	Open func(w *Watcher) error
	// Rescoped, when set, is told that a watcher took a new set of services.
	Rescoped func(w *Watcher)
}

// Hub is the set of open watchers and the senders that run them.
type Hub struct {
	sched[*Watcher]
	cfg Config
}

// sched is the set of open watchers of type R and the senders that run them.
type sched[R runner] struct {
	pool pool[R]

	mu       sync.Mutex
	watching []R
	toQueue  []R // SignalAll's, kept for the next

	// period counts the periods of StuckAfter, from 1: a send notes the one it
	// began in (Member.sending). A load, where reading the clock on every send
	// of a fan-out cost 2% of it.
	period atomic.Int64
	// periodAt is when the current period began, Unix ns: SendClock turns a
	// send's period into a time with it.
	periodAt atomic.Int64
}

// New returns a hub without watchers.
func New(cfg Config) *Hub {
	h := &Hub{cfg: cfg}
	h.init()
	return h
}

func (h *sched[R]) init() {
	h.period.Store(1) // 0 is no send under way
	h.periodAt.Store(time.Now().UnixNano())
}

// Serve runs a watch stream's watcher, from the stream's handler goroutine,
// until the stream ends, and returns whether the watcher was Started and the
// error that ended the stream. When the stream's context ends first, it has the
// watcher run once more to see that, so that no send is under way when it
// returns.
func (h *Hub) Serve(w *Watcher) (opened bool, err error) {
	w.h, w.opening, w.done = h, true, make(chan error, 1)
	h.open(w)
	select {
	case err = <-w.done:
	case <-w.Stream.Context().Done():
		w.WakeFor(WakeEnded)
		err = <-w.done
	}
	return w.close(), err
}

// open adds a new watcher and queues it: its first run opens its stream.
func (h *sched[R]) open(w R) {
	m := w.member()
	m.move(Idle, Queued)
	h.mu.Lock()
	m.slot = int32(len(h.watching))
	h.watching = append(h.watching, w)
	h.mu.Unlock()
	h.pool.push(w)
}

// remove takes a watcher out once its stream has ended.
func (h *sched[R]) remove(w R) {
	m := w.member()
	h.mu.Lock()
	last := len(h.watching) - 1
	moved := h.watching[last]
	h.watching[m.slot], moved.member().slot = moved, m.slot
	var none R
	h.watching[last] = none
	h.watching = h.watching[:last]
	h.mu.Unlock()
}

// schedule makes sure w is run once more after this call.
func (h *sched[R]) schedule(w R) {
	if w.member().mark() {
		h.pool.push(w)
	}
}

// SignalAll schedules every watcher: a watcher that found nothing new before the
// signal looks again. Scoped watchers too: they report skipped changes as
// PROGRESS.
func (h *sched[R]) SignalAll() {
	h.mu.Lock()
	queue := h.toQueue[:0]
	for _, w := range h.watching {
		if w.member().mark() {
			queue = append(queue, w)
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
func (h *sched[R]) Tick() {
	// Sends that began two periods ago or earlier have been under way for a
	// whole period at least.
	p := h.period.Add(1)
	h.periodAt.Store(time.Now().UnixNano())
	h.pool.unstick(h.stalled(p - 2))
}

// stalled counts the watchers whose send under way began in period last or
// earlier.
func (h *sched[R]) stalled(last int64) int {
	n := 0
	h.mu.Lock()
	for _, w := range h.watching {
		if at := w.member().sending.Load(); at != 0 && at <= last {
			n++
		}
	}
	h.mu.Unlock()
	return n
}

// BeginSend notes that w begins a send (or a receive) that a client can block.
func (w *Watcher) BeginSend() { w.sending.Store(w.h.period.Load()) }

// EndSend notes that the send BeginSend noted is over.
func (w *Watcher) EndSend() { w.sending.Store(0) }

// SendingSince is the period the send under way began in, 0 if none
// (SendClock turns it into a time).
func (m *Member) SendingSince() int64 { return m.sending.Load() }

// SendClock returns a function that turns the period a send began in
// (Member.SendingSince) into the latest time it can have begun: the start of the
// next period, or now for a send of the current one; zero for none.
func (h *sched[R]) SendClock() func(period int64) time.Time {
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
func (m *Member) State() State { return State(m.st.Load()) }

// mark notes that m's watcher is to be run once more, and reports whether the
// caller must queue it (it was idle).
func (m *Member) mark() bool {
	// The rows idle → queued and queued → rerun of transitions, without move's
	// check: this runs for every watcher on every event, and move would not let
	// it inline.
	for {
		switch st := State(m.st.Load()); st {
		case Idle:
			if m.st.CompareAndSwap(int32(Idle), int32(Queued)) {
				return true
			}
		case Queued:
			if m.st.CompareAndSwap(int32(Queued), int32(Rerun)) {
				return false
			}
		default: // rerun, finished
			return false
		}
	}
}

// drain runs w until it is current or its stream has ended, then releases it,
// running it again if it was scheduled meanwhile.
func drain[R runner](w R) {
	m := w.member()
	for {
		if err := w.run(); err != nil {
			m.finish()
			w.ended(err)
			return
		}
		if m.move(Queued, Idle) {
			return
		}
		m.move(Rerun, Queued) // it was rerun: look again
	}
}

// finish moves m, being run, to Finished: from Queued, or from Rerun if
// something scheduled it meanwhile (only its sender moves it from either).
func (m *Member) finish() {
	for !m.move(m.State(), Finished) {
	}
}
