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

// A reader that falls far behind costs memory in proportion to the endpoints that
// changed, not to the changes: past the bound the queue keeps each endpoint's net
// change, and the reader still ends with the writer's state.
func TestBoundedForAReaderFarBehind(t *testing.T) {
	q := New()
	ep := func(i, v int) endpoint.Endpoint {
		return endpoint.Endpoint{Service: "web", Port: i, Weight: v}
	}
	// Initial state: keys 0..9 exist; the reader has seen them.
	const keys = 10
	for i := range keys {
		q.Push(registry.Event{Type: registry.Added, Endpoint: ep(i, 0)})
	}
	q.Push(registry.Event{Type: registry.Synced})
	want := map[int]int{}
	for i := range keys {
		want[i] = 0
	}
	// 100,000 changes nobody reads: updates, removals and re-additions.
	for n := range 100000 {
		i := n % (keys + 5)
		switch _, ok := want[i]; {
		case !ok:
			q.Push(registry.Event{Type: registry.Added, Endpoint: ep(i, n)})
			want[i] = n
		case n%7 == 0:
			q.Push(registry.Event{Type: registry.Removed, Endpoint: ep(i, 0)})
			delete(want, i)
		default:
			q.Push(registry.Event{Type: registry.Updated, Endpoint: ep(i, n)})
			want[i] = n
		}
		if l := q.Len(); l > DefaultLimit+keys+5+1 {
			t.Fatalf("after %d pushes the queue holds %d events, over its bound", n+1, l)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	go q.Run(ctx)
	got := map[int]int{}
	synced := false
	for !synced || !sameState(got, want) {
		select {
		case ev := <-q.C():
			switch ev.Type {
			case registry.Synced:
				synced = true
			case registry.Added:
				if _, ok := got[ev.Endpoint.Port]; ok {
					t.Fatalf("Added for %d, which the reader already has", ev.Endpoint.Port)
				}
				got[ev.Endpoint.Port] = ev.Endpoint.Weight
			case registry.Updated:
				if _, ok := got[ev.Endpoint.Port]; !ok {
					t.Fatalf("Updated for %d, which the reader does not have", ev.Endpoint.Port)
				}
				got[ev.Endpoint.Port] = ev.Endpoint.Weight
			case registry.Removed:
				if _, ok := got[ev.Endpoint.Port]; !ok {
					t.Fatalf("Removed for %d, which the reader does not have", ev.Endpoint.Port)
				}
				delete(got, ev.Endpoint.Port)
			}
		case <-ctx.Done():
			t.Fatalf("reader ended with %v, want %v", got, want)
		}
	}
}

func sameState(a, b map[int]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}
