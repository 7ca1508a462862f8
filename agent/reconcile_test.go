package agent

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/registry"
)

// countedErr counts how often its text is asked for.
type countedErr struct{ n *atomic.Int64 }

func (e countedErr) Error() string { e.n.Add(1); return "registry unreachable" }

// failingPublisher fails every write with err.
type failingPublisher struct{ err error }

func (p failingPublisher) Apply(context.Context, []registry.Op) error { return p.err }

// TestFailedBatchFormatsItsErrorOnce: a batch that fails records the same error on
// each of its entries and logs it for each, but formats it once, not once an entry.
func TestFailedBatchFormatsItsErrorOnce(t *testing.T) {
	var formatted atomic.Int64
	a := New(manifestOf(), Options{Publisher: failingPublisher{countedErr{&formatted}}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	l := &loop{Agent: a, byKey: map[endpoint.Key]*entry{}, orphans: map[endpoint.Key]*entry{}}
	for i := range 100 {
		e := newEntry(mentry(ep(fmt.Sprintf("svc%d", i), "10.0.0.1", 80, 0)))
		l.entries = append(l.entries, e)
		l.byKey[e.m.Endpoint.Key()] = e
	}
	l.reconcile(context.Background(), time.Now())
	for _, e := range l.entries {
		if e.failures != 1 || e.writeErr != "registry unreachable" {
			t.Fatalf("entry %s: failures %d, write error %q", e.m.Endpoint.Key(), e.failures, e.writeErr)
		}
	}
	if n := formatted.Load(); n != 1 {
		t.Fatalf("the batch's error was formatted %d times for 100 entries, want once", n)
	}
}
