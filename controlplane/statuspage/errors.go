package statuspage

import (
	"errors"
	"maps"
	"sync"
	"time"

	"github.com/switchboard-mesh/switchboard/controlplane/nodestream"
	"github.com/switchboard-mesh/switchboard/controlplane/reconcile"
)

// ReconcileError is one failed reconciler visit.
type ReconcileError struct {
	Time       time.Time `json:"time"`
	Reconciler string    `json:"reconciler"`
	Node       string    `json:"node"`
	Error      string    `json:"error"`
}

// ErrorLog keeps the most recent reconcile errors, newest first, and the nodes that
// do not answer the reconcilers' requests. The zero value is not usable; call
// NewErrorLog.
type ErrorLog struct {
	mu   sync.Mutex
	max  int
	buf  []ReconcileError // ring; next is where the next one goes
	next int
	full bool
	now  func() time.Time
	// silent are the nodes whose last visit timed out, with the start of their
	// silence.
	silent map[string]time.Time
}

// NewErrorLog keeps up to max errors (100 when max <= 0).
func NewErrorLog(max int) *ErrorLog {
	if max <= 0 {
		max = 100
	}
	return &ErrorLog{max: max, buf: make([]ReconcileError, max), now: time.Now, silent: map[string]time.Time{}}
}

// Observe returns a reconcile queue's OnResult that records the queue's errors and
// whether the node answered. A request to retry soon is the reconcilers' way of
// waiting for a link, not a fault, and is left out of the errors.
func (l *ErrorLog) Observe(reconciler string) func(string, time.Duration, error) {
	return func(node string, _ time.Duration, err error) {
		l.track(node, err)
		if err == nil || errors.Is(err, reconcile.ErrRetrySoon) {
			return
		}
		l.Record(reconciler, node, err)
	}
}

// Record adds one error.
func (l *ErrorLog) Record(reconciler, node string, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf[l.next] = ReconcileError{Time: l.now(), Reconciler: reconciler, Node: node, Error: err.Error()}
	l.next = (l.next + 1) % l.max
	if l.next == 0 {
		l.full = true
	}
}

// track notes whether a visit found the node silent: a request timeout says since
// when the node has not answered; any other outcome means it answered, or left.
func (l *ErrorLog) track(node string, err error) {
	var timeout *nodestream.TimeoutError
	l.mu.Lock()
	defer l.mu.Unlock()
	if errors.As(err, &timeout) {
		l.silent[node] = timeout.Since
		return
	}
	delete(l.silent, node)
}

// NotAnswering returns the nodes whose last visit timed out, with the time since
// which each has not answered.
func (l *ErrorLog) NotAnswering() map[string]time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return maps.Clone(l.silent)
}

// Recent returns the errors kept, newest first.
func (l *ErrorLog) Recent() []ReconcileError {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := l.next
	if l.full {
		n = l.max
	}
	out := make([]ReconcileError, 0, n)
	for i := 1; i <= n; i++ {
		out = append(out, l.buf[(l.next-i+l.max)%l.max])
	}
	return out
}
