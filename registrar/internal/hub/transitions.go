package hub

import "fmt"

// State is a watcher's run state.
type State int32

// The run states.
const (
	Idle     State = iota // nothing to do, not queued
	Queued                // queued or being run
	Rerun                 // being run, and scheduled again meanwhile: run it once more
	Finished              // its stream ended: never run again
	numStates
)

// String is the state's name, as the transition table writes it.
func (s State) String() string {
	switch s {
	case Idle:
		return "idle"
	case Queued:
		return "queued"
	case Rerun:
		return "rerun"
	case Finished:
		return "finished"
	}
	return fmt.Sprintf("State(%d)", int32(s))
}

// Transition is one allowed change of a watcher's run state, and what makes it.
type Transition struct {
	From, To State
	By       string
}

// transitions are every change of run state there is. Every change goes through
// Member.move, which refuses one that is not here, except mark's two (the first
// two rows), which are bare compare-and-swaps so that mark stays inlined in the
// loop over every watcher that each event makes: a watcher is run by one
// sender at a time, and runs again if it was scheduled while it ran, only as
// long as no other change happens.
//
//	from     to        by
//	idle     queued    schedule: it may have something to do; the caller queues it (Open too)
//	queued   rerun     schedule while it is queued or being run: run it once more
//	queued   idle      drain: it is current, and nothing scheduled it meanwhile
//	rerun    queued    drain: something scheduled it meanwhile: look again
//	queued   finished  drain: its stream ended
//	rerun    finished  drain: its stream ended, and it was scheduled meanwhile
//
// A finished watcher stays finished: a schedule of it changes nothing.
var transitions = []Transition{
	{Idle, Queued, "schedule"},
	{Queued, Rerun, "schedule"},
	{Queued, Idle, "current"},
	{Rerun, Queued, "rescheduled"},
	{Queued, Finished, "ended"},
	{Rerun, Finished, "ended"},
}

// allowed is transitions as a table: allowed[from][to].
var allowed = func() (a [numStates][numStates]bool) {
	for _, t := range transitions {
		a[t.From][t.To] = true
	}
	return a
}()

// move changes m's run state from from to to, if it is from, and reports
// whether it did. It panics on a change that is not a transition: a bug.
func (m *Member) move(from, to State) bool {
	if !allowed[from][to] {
		badMove(from, to)
	}
	return m.st.CompareAndSwap(int32(from), int32(to))
}

// badMove is move's panic, out of line so that move (and the scheduling that
// calls it for every watcher on every event) stays inlined.
//
//go:noinline
func badMove(from, to State) {
	panic(fmt.Sprintf("hub: %v to %v is not a run state transition", from, to))
}
