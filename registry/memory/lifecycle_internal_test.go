package memory

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/registry"
)

func nextEvent(t *testing.T, ch <-chan registry.Event) registry.Event {
	t.Helper()
	select {
	case ev, ok := <-ch:
		if !ok {
			t.Fatal("watch channel closed")
		}
		return ev
	case <-time.After(5 * time.Second):
		t.Fatal("no event within 5s")
	}
	return registry.Event{}
}

// An entry past its TTL is gone for List at once, but the expiry loop removes it (and
// tells watchers) only when it wakes. Registering the key again in between must not
// show watchers a second Added for a key they hold: they see the expiry, then the
// new entry.
func TestReregisterExpiredBeforeReap(t *testing.T) {
	// The store's clock runs skew ahead of the real one; the expiry loop sleeps in
	// real time, so an entry past its deadline on the store's clock stays unreaped.
	var skew atomic.Int64
	s := newStore()
	s.mu.Lock()
	s.now = func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
	s.mu.Unlock()
	r := registry.NewFront("memory", s)
	defer r.Close()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch, err := r.Watch(ctx, endpoint.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if ev := nextEvent(t, ch); ev.Type != registry.Synced {
		t.Fatalf("first event %s, want synced", ev.Type)
	}
	a := endpoint.Endpoint{Cluster: "prod", Service: "web", Protocol: "http", Address: "10.0.0.1", Port: 80, Priority: 1,
		TTL: endpoint.TTL(time.Hour)}
	if err := r.Apply(ctx, []registry.Op{registry.Register(a)}); err != nil {
		t.Fatal(err)
	}
	if ev := nextEvent(t, ch); ev.Type != registry.Added {
		t.Fatalf("event %s, want added", ev.Type)
	}
	skew.Store(int64(2 * time.Hour)) // expired on the store's clock; the loop sleeps on
	if eps, err := r.List(ctx, endpoint.Filter{}); err != nil || len(eps) != 0 {
		t.Fatalf("List after expiry = %v, %v; want nothing", eps, err)
	}
	again := a.Clone()
	again.TTL = endpoint.Never
	if err := r.Apply(ctx, []registry.Op{registry.Register(again)}); err != nil {
		t.Fatal(err)
	}
	var got []registry.EventType
	for _, want := range []registry.EventType{registry.Removed, registry.Added} {
		ev := nextEvent(t, ch)
		got = append(got, ev.Type)
		if ev.Type != want || ev.Endpoint.Key() != a.Key() {
			t.Fatalf("events after re-registering an expired entry: %v (%s), want [removed added]", got, ev.Endpoint.Key())
		}
	}
}

// Close must count every watch it ends: a Watch racing Close either fails with
// ErrClosed or has its goroutines counted before Close waits. The race detector
// (the tests run with -race) reports a goroutine counted after Close began waiting as
// a race on the WaitGroup; each round varies where Close lands in Watch.
func TestCloseWaitsForRacingWatches(t *testing.T) {
	for i := range 3000 {
		r := New()
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		started := make(chan struct{})
		wg.Go(func() {
			close(started)
			ch, err := r.Watch(ctx, endpoint.Filter{})
			if err != nil {
				if !errors.Is(err, registry.ErrClosed) {
					t.Errorf("Watch racing Close = %v, want nil or ErrClosed", err)
				}
				return
			}
			for range ch {
			}
		})
		<-started
		for range i % 7 {
			runtime.Gosched()
		}
		_ = r.Close()
		wg.Wait()
		cancel()
	}
}
