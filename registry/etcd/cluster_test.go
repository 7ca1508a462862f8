package etcd

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/internal/embedetcd"
	"github.com/switchboard-mesh/switchboard/registry"
)

// applyRetrying writes like the registrar's writer does: retrying through the
// leader election that follows losing a member.
func applyRetrying(t *testing.T, r registry.Registry, ops ...registry.Op) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		err := r.Apply(ctx, ops)
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("Apply did not succeed within 30s: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestThreeMemberCluster stops each member of a three-member cluster in turn —
// whichever one holds the leader role or the watch stream — and checks that
// writes, lists and an open watch carry on, with every change seen exactly once.
func TestThreeMemberCluster(t *testing.T) {
	c := embedetcd.New(t, embedetcd.Options{Members: 3})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	r, err := New(ctx, Options{Endpoints: c.Endpoints(), Prefix: "/cluster/"})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ch, err := r.Watch(ctx, endpoint.Filter{Service: "web"})
	if err != nil {
		t.Fatal(err)
	}
	expectEvents(t, ch, synced())
	var want []endpoint.Endpoint
	for i, m := range c.Members() {
		m.Stop()
		e := withTTL(ep("prod", "web", "http", fmt.Sprintf("10.0.%d.1", i), 80), time.Minute)
		applyRetrying(t, r, registry.Register(e), registry.Register(ep("prod", "db", "tcp", "10.9.9.9", i)))
		want = append(want, e)
		// The next event is this write's: nothing earlier repeated, nothing lost.
		expectEvents(t, ch, added(e))
		got, err := r.List(ctx, endpoint.Filter{Service: "web"})
		if err != nil {
			t.Fatalf("List with member %s down: %v", m.Name(), err)
		}
		if len(got) != len(want) {
			t.Fatalf("List with member %s down = %d endpoints, want %d", m.Name(), len(got), len(want))
		}
		if err := m.Restart(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// With every member back, one more change arrives exactly once.
	applyRetrying(t, r, registry.Unregister(want[0]))
	expectEvents(t, ch, removed(want[0]))
	expectQuiet(t, ch)
}
