package feed

import (
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/registry"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestOrderedAndUnbounded(t *testing.T) {
	q := New()
	// Far more than any channel buffer, pushed before anyone reads: Push never blocks.
	const n = 10000
	for i := range n {
		q.Push(registry.Event{Type: registry.Added, Endpoint: endpoint.Endpoint{Port: i}})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	go q.Run(ctx)
	for i := range n {
		ev := <-q.C()
		if ev.Endpoint.Port != i {
			t.Fatalf("event %d carries port %d: out of order", i, ev.Endpoint.Port)
		}
	}
	q.Push(registry.Event{Type: registry.Synced})
	if ev := <-q.C(); ev.Type != registry.Synced {
		t.Fatalf("late push: got %v", ev.Type)
	}
	q.Stop()
	if _, ok := <-q.C(); ok {
		t.Fatal("channel open after Stop")
	}
	q.Stop() // idempotent
}

func TestContextEndsRun(t *testing.T) {
	q := New()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { q.Run(ctx); close(done) }()
	q.Push(registry.Event{Type: registry.Added}) // never read
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after the context ended")
	}
}
