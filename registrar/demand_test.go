package registrar

import (
	"strings"
	"testing"
	"time"

	"github.com/switchboard-mesh/switchboard/endpoint"
	registrarv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/registrar/v1"
	"github.com/switchboard-mesh/switchboard/registry"
	"github.com/switchboard-mesh/switchboard/registry/memory"
)

// demandFleet is a backend with the registrar's own cluster (east) and another
// (west) with two services, and a registrar on it holding what is demanded.
func demandFleet(t *testing.T) (*testServer, *registry.Front, []endpoint.Endpoint) {
	t.Helper()
	b := memory.New()
	t.Cleanup(func() { b.Close() })
	eps := []endpoint.Endpoint{ep("east", "web", "10.0.0.1", 80), ep("west", "db", "10.1.0.1", 5432),
		ep("west", "db", "10.1.0.2", 5432), ep("west", "cache", "10.1.0.3", 6379)}
	ops := make([]registry.Op, len(eps))
	for i, e := range eps {
		ops[i] = registry.Register(e)
	}
	if err := b.Apply(testCtx(t), ops); err != nil {
		t.Fatal(err)
	}
	ts := startServer(t, Config{Backend: b, Hold: HoldDemanded, HoldGrace: 300 * time.Millisecond, BatchInterval: 10 * time.Millisecond})
	return ts, b, eps
}

func waitCounts(t *testing.T, r *Registrar, want map[string]int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := r.Counts()
		if len(got) == len(want) && func() bool {
			for c, n := range want {
				if got[c] != n {
					return false
				}
			}
			return true
		}() {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("snapshot counts %v, want %v", got, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// With --hold demanded a replica holds its own cluster, and of the others only the
// services a scoped watcher asks for: the first watcher of one gets all of it in
// its first snapshot and its changes after; once no watcher asks for it for the
// grace, it is let go.
func TestDemandedHoldKeepsWhatWatchersAskFor(t *testing.T) {
	ts, b, eps := demandFleet(t)
	r := ts.Registrar()
	waitCounts(t, r, map[string]int{"east": 1})

	w := openScoped(t, ts.client, "", 1, "db", "web")
	parts, _ := w.untilComplete(t)
	if got := snapshotKeys(parts); len(got) != 3 || !got[eps[0].Key()] || !got[eps[1].Key()] || !got[eps[2].Key()] {
		t.Fatalf("first snapshot of db and web = %v, want east's web and both of west's db", got)
	}
	waitCounts(t, r, map[string]int{"east": 1, "west": 2})

	// Another cluster's change to a held service reaches the watcher.
	moved := eps[1]
	moved.Weight = 9
	if err := b.Apply(testCtx(t), []registry.Op{registry.Register(moved)}); err != nil {
		t.Fatal(err)
	}
	ev := w.next(t)
	for ev.GetType() == registrarv1.EndpointEvent_PROGRESS {
		ev = w.next(t)
	}
	if ev.GetType() != registrarv1.EndpointEvent_ENDPOINT_UPDATED || keyOf(ev.GetEndpoint()) != moved.Key() {
		t.Fatalf("after west changed db: %v %v, want ENDPOINT_UPDATED of %s", ev.GetType(), keyOf(ev.GetEndpoint()), moved.Key())
	}

	// The watcher leaves: west's db is let go after the grace; east stays.
	w.cancel()
	waitCounts(t, r, map[string]int{"east": 1})
	if n := r.demand.count(); n != 0 {
		t.Fatalf("%d services still held after their last watcher left and the grace passed", n)
	}
}

// A listing of what a replica holding what is demanded does not hold is read from
// the backend; one of what it holds is its snapshot's.
func TestDemandedHoldListsWhatItDoesNotHoldFromTheBackend(t *testing.T) {
	ts, _, eps := demandFleet(t)
	waitCounts(t, ts.Registrar(), map[string]int{"east": 1})
	for _, c := range []struct {
		f    *registrarv1.ListAllEndpointsRequest
		want []endpoint.Key
	}{
		{&registrarv1.ListAllEndpointsRequest{Service: "cache"}, []endpoint.Key{eps[3].Key()}},
		{&registrarv1.ListAllEndpointsRequest{}, []endpoint.Key{eps[0].Key(), eps[1].Key(), eps[2].Key(), eps[3].Key()}},
		{&registrarv1.ListAllEndpointsRequest{Cluster: "east"}, []endpoint.Key{eps[0].Key()}},
	} {
		resp, err := ts.client.ListAllEndpoints(testCtx(t), c.f)
		if err != nil {
			t.Fatal(err)
		}
		got := map[endpoint.Key]bool{}
		for _, p := range resp.GetEndpoints() {
			got[keyOf(p)] = true
		}
		if len(got) != len(c.want) || resp.GetVersion() == "" {
			t.Fatalf("ListAllEndpoints(%v) = %v (version %q), want %v", c.f, got, resp.GetVersion(), c.want)
		}
		for _, k := range c.want {
			if !got[k] {
				t.Fatalf("ListAllEndpoints(%v) = %v, want %v", c.f, got, c.want)
			}
		}
	}
}

// A replica holding all (the default) holds every cluster's endpoints; an unknown
// hold is refused, naming it.
func TestHoldAllIsTheDefaultAndBadHoldsAreRefused(t *testing.T) {
	b := memory.New()
	t.Cleanup(func() { b.Close() })
	if err := b.Apply(testCtx(t), []registry.Op{registry.Register(ep("west", "db", "10.1.0.1", 5432))}); err != nil {
		t.Fatal(err)
	}
	ts := startServer(t, Config{Backend: b})
	waitCounts(t, ts.Registrar(), map[string]int{"west": 1})
	if _, err := New(Config{Cluster: "east", Backend: b, Hold: "some"}); err == nil || !strings.Contains(err.Error(), `hold "some"`) {
		t.Fatalf("New with hold \"some\": %v, want an error naming it", err)
	}
}

// A scoped stream that takes a new set gets a whole snapshot of it, read from the
// backend first when the replica did not hold it; what only the old set asked for
// is let go after the grace.
func TestDemandedHoldFollowsANewSet(t *testing.T) {
	ts, _, eps := demandFleet(t)
	r := ts.Registrar()
	w := openScoped(t, ts.client, "", 1, "db")
	_, _ = w.untilComplete(t)
	if err := w.send(&registrarv1.WatchEndpointsRequest{Services: []string{"cache"}, ScopeId: 2}); err != nil {
		t.Fatal(err)
	}
	parts, done := w.untilComplete(t)
	if got := snapshotKeys(parts); len(got) != 1 || !got[eps[3].Key()] || done.GetScopeId() != 2 {
		t.Fatalf("snapshot of the new set = %v (scope_id %d), want only %s with scope_id 2", got, done.GetScopeId(), eps[3].Key())
	}
	waitCounts(t, r, map[string]int{"east": 1, "west": 1})
}
