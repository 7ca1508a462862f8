package hub

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

// stepper is a runner whose every run waits for the test to say what it
// returns, so that the test sees the run state while a sender runs it.
type stepper struct {
	Member
	started  chan struct{} // a Step began
	results  chan error    // what each Step returns
	finished chan error    // what Finish was told
}

func newStepper() *stepper {
	return &stepper{started: make(chan struct{}, 1), results: make(chan error), finished: make(chan error, 1)}
}

func (s *stepper) run() error      { s.started <- struct{}{}; return <-s.results }
func (s *stepper) ended(err error) { s.finished <- err }

// running returns a hub with one watcher, opened, whose first run is under way:
// the watcher is queued.
func running(t *testing.T) (*sched[*stepper], *Member, *stepper) {
	t.Helper()
	h, s := &sched[*stepper]{}, newStepper()
	h.init()
	m := &s.Member
	h.open(s)
	<-s.started
	wantState(t, m, Queued)
	return h, m, s
}

func wantState(t *testing.T, m *Member, want State) {
	t.Helper()
	if got := m.State(); got != want {
		t.Fatalf("run state %v, want %v", got, want)
	}
}

// settles waits for m's run state to become want: its sender moves it after run
// returns.
func settles(t *testing.T, m *Member, want State) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for m.State() != want {
		if time.Now().After(deadline) {
			t.Fatalf("run state %v, want %v", m.State(), want)
		}
		time.Sleep(time.Millisecond)
	}
}

var errEnded = errors.New("stream ended")

// walks makes each transition of the table happen through the hub's own code
// paths (open, schedule, SignalAll and a sender's run), from a watcher brought to
// the transition's first state by transitions walked before.
var walks = map[[2]State]func(t *testing.T){
	{Idle, Queued}: func(t *testing.T) {
		h, m, s := running(t) // Open: idle to queued
		s.results <- nil
		settles(t, m, Idle)
		h.schedule(s) // schedule: idle to queued
		<-s.started
		wantState(t, m, Queued)
		s.results <- nil
		settles(t, m, Idle)
		h.SignalAll() // a signal schedules it too
		<-s.started
		wantState(t, m, Queued)
		s.results <- nil
		settles(t, m, Idle)
	},
	{Queued, Rerun}: func(t *testing.T) {
		h, m, s := running(t)
		h.schedule(s)
		wantState(t, m, Rerun)
		h.SignalAll() // rerun already: nothing changes
		wantState(t, m, Rerun)
		s.results <- nil
		<-s.started
		s.results <- nil
		settles(t, m, Idle)
	},
	{Queued, Idle}: func(t *testing.T) {
		_, m, s := running(t)
		s.results <- nil
		settles(t, m, Idle)
		select {
		case <-s.started:
			t.Fatal("a current watcher nothing scheduled was run again")
		case <-time.After(20 * time.Millisecond):
		}
	},
	{Rerun, Queued}: func(t *testing.T) {
		h, m, s := running(t)
		h.schedule(s)
		s.results <- nil
		<-s.started // run again, without being queued again
		wantState(t, m, Queued)
		s.results <- nil
		settles(t, m, Idle)
	},
	{Queued, Finished}: func(t *testing.T) {
		h, m, s := running(t)
		s.results <- errEnded
		if err := <-s.finished; err != errEnded {
			t.Fatalf("Finish told %v, want %v", err, errEnded)
		}
		wantState(t, m, Finished)
		h.schedule(s) // finished stays finished, and is not run
		h.SignalAll()
		wantState(t, m, Finished)
		select {
		case <-s.started:
			t.Fatal("a finished watcher was run")
		case <-time.After(20 * time.Millisecond):
		}
		h.remove(s)
	},
	{Rerun, Finished}: func(t *testing.T) {
		h, m, s := running(t)
		h.schedule(s)
		wantState(t, m, Rerun)
		s.results <- errEnded
		if err := <-s.finished; err != errEnded {
			t.Fatalf("Finish told %v, want %v", err, errEnded)
		}
		wantState(t, m, Finished)
	},
}

// TestEveryTransition walks every transition of the table, and the table has no
// transition the walks do not make.
func TestEveryTransition(t *testing.T) {
	for _, tr := range transitions {
		walk, ok := walks[[2]State{tr.From, tr.To}]
		if !ok {
			t.Errorf("no walk makes %v to %v (%s)", tr.From, tr.To, tr.By)
			continue
		}
		t.Run(fmt.Sprintf("%v to %v", tr.From, tr.To), walk)
	}
	for k := range walks {
		if !allowed[k[0]][k[1]] {
			t.Errorf("a walk makes %v to %v, which the table does not allow", k[0], k[1])
		}
	}
}

// Every change of run state that is not in the table is refused.
func TestOnlyTableTransitions(t *testing.T) {
	for from := range numStates {
		for to := range numStates {
			if allowed[from][to] {
				continue
			}
			func() {
				defer func() {
					if recover() == nil {
						t.Errorf("%v to %v was allowed", from, to)
					}
				}()
				var m Member
				m.st.Store(int32(from))
				m.move(from, to)
			}()
		}
	}
}
