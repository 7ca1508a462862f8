package registrar

import (
	"context"
	"fmt"
	"testing"

	"github.com/switchboard-mesh/switchboard/endpoint"
	registrarv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/registrar/v1"
	"github.com/switchboard-mesh/switchboard/internal/wire"
	"github.com/switchboard-mesh/switchboard/registrar/internal/view"
	"github.com/switchboard-mesh/switchboard/registrar/token"
	"github.com/switchboard-mesh/switchboard/registry"
	"github.com/switchboard-mesh/switchboard/registry/memory"
)

// restarted takes a watcher's token from registrar A over a memory backend
// holding seed, stops A, lets between change the backend while no registrar runs,
// starts B (another epoch) on the same backend and returns it with the token.
func restarted(t *testing.T, seed []endpoint.Endpoint, services []string, between func(registry.Registry)) (*testServer, string) {
	t.Helper()
	b := memory.New()
	t.Cleanup(func() { b.Close() })
	if err := b.Apply(testCtx(t), registerAll(seed)); err != nil {
		t.Fatal(err)
	}
	a := startServer(t, Config{Backend: b})
	_, done := watchScoped(t, a, "", services).untilComplete(t)
	if done.GetResumed() {
		t.Fatal("a new watcher's first SNAPSHOT_COMPLETE says resumed")
	}
	if err := a.stop(t); err != nil {
		t.Fatal(err)
	}
	between(b)
	bs := startServer(t, Config{Backend: b})
	if bs.Registrar().view.Epoch() == a.Registrar().view.Epoch() {
		t.Fatal("both registrars drew the same epoch")
	}
	return bs, done.GetVersion()
}

func registerAll(eps []endpoint.Endpoint) []registry.Op {
	ops := make([]registry.Op, len(eps))
	for i, e := range eps {
		ops[i] = registry.Register(e)
	}
	return ops
}

// watchScoped opens a watch of the given services (nil: all) from token.
func watchScoped(t *testing.T, ts *testServer, tok string, services []string) *rawWatch {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	st, err := ts.client.WatchEndpoints(ctx, &registrarv1.WatchEndpointsRequest{NodeName: "test", LastVersion: tok, Services: services})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	return readWatch(t, st.Recv, cancel)
}

func fleetOf(n int) []endpoint.Endpoint {
	eps := make([]endpoint.Endpoint, n)
	for i := range eps {
		eps[i] = ep("east", fmt.Sprintf("svc%d", i%3), fmt.Sprintf("10.0.%d.%d", i/256, i%256), 80)
		eps[i].Annotations = map[string]string{"zone": fmt.Sprint(i % 4), "rack": fmt.Sprint(i % 7), "pool": "a", "tier": "web"}
	}
	return eps
}

// After a restart with nothing changed, a watcher's token of the old epoch resumes:
// no snapshot, a resumed SNAPSHOT_COMPLETE at the new epoch, and changes after it.
func TestResumeAcrossRestart(t *testing.T) {
	for _, tc := range []struct {
		name     string
		services []string
	}{{"all services", nil}, {"scoped", []string{"svc1"}}} {
		t.Run(tc.name, func(t *testing.T) {
			b, tok := restarted(t, fleetOf(50), tc.services, func(registry.Registry) {})
			w := watchScoped(t, b, tok, tc.services)
			parts, done := w.untilComplete(t)
			if len(parts) != 0 || !done.GetResumed() {
				t.Fatalf("token %s at a restarted registrar: %d events before SNAPSHOT_COMPLETE (resumed %v), want none and resumed",
					tok, len(parts), done.GetResumed())
			}
			v, err := token.Parse(done.GetVersion())
			if err != nil || v != b.Registrar().view.VersionAt(v.Seq) || v.Epoch != b.Registrar().view.Epoch() {
				t.Fatalf("resumed at %s (%v), want a version of the new epoch with its digest", done.GetVersion(), err)
			}
			late := ep("east", "svc1", "10.9.9.9", 80)
			register(t, b, late)
			expectChange(t, w, registrarv1.EndpointEvent_ENDPOINT_ADDED, late)
		})
	}
}

// A token that does not name the restarted registrar's state gets a full snapshot.
func TestNoResumeAcrossRestart(t *testing.T) {
	eps := fleetOf(20)
	changed := eps[7]
	changed.Weight = 9
	for _, tc := range []struct {
		name    string
		between func(registry.Registry)
		token   func(string) string
		want    int
	}{
		{name: "an endpoint changed meanwhile", want: len(eps), between: func(b registry.Registry) {
			if err := b.Apply(context.Background(), []registry.Op{registry.Register(changed)}); err != nil {
				t.Error(err)
			}
		}},
		{name: "an endpoint removed meanwhile", want: len(eps) - 1, between: func(b registry.Registry) {
			if err := b.Apply(context.Background(), []registry.Op{registry.Unregister(changed)}); err != nil {
				t.Error(err)
			}
		}},
		{name: "a token without a digest", want: len(eps), token: func(s string) string {
			v, _ := token.Parse(s)
			v.HasDigest = false
			return v.String()
		}},
		{name: "a malformed token", want: len(eps), token: func(s string) string { return s + ".0" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			between, tokenOf := tc.between, tc.token
			if between == nil {
				between = func(registry.Registry) {}
			}
			if tokenOf == nil {
				tokenOf = func(s string) string { return s }
			}
			b, tok := restarted(t, eps, nil, between)
			parts, done := watchScoped(t, b, tokenOf(tok), nil).untilComplete(t)
			if got := len(snapshotKeys(parts)); done.GetResumed() || got != tc.want {
				t.Fatalf("got %d endpoints (resumed %v), want a full snapshot of %d", got, done.GetResumed(), tc.want)
			}
		})
	}
}

// The digest is of the state, not of the path to it: registrars that reached the
// same endpoints in different orders, through changes undone, agree; it stays the
// sum of the entries' sums through every put and drop.
func TestDigestIsOfTheState(t *testing.T) {
	eps := fleetOf(30)
	detour := ep("east", "tmp", "10.8.0.1", 80)
	one := startServer(t, Config{})
	register(t, one, eps...)
	two := startServer(t, Config{})
	register(t, two, detour)
	for i := len(eps) - 1; i >= 0; i-- {
		moved := eps[i]
		moved.Weight = 3
		register(t, two, moved)
		register(t, two, eps[i])
	}
	unregister(t, two, detour)
	d1, d2 := one.Registrar().view.Current().Digest, two.Registrar().view.Current().Digest
	if d1 != d2 {
		t.Fatalf("digests %016x and %016x of the same state differ", d1, d2)
	}
	var sum uint64
	two.Registrar().view.Read(func(h view.Reader) {
		for e := range h.Entries() {
			sum += view.EntrySum(wire.MarshalEndpoint(e))
		}
	})
	if sum != d2 {
		t.Fatalf("digest %016x, but the entries sum to %016x", d2, sum)
	}
}

// One endpoint has one wire form, whatever the order its annotations' map yields.
func TestWireFormIsDeterministic(t *testing.T) {
	e := fleetOf(1)[0]
	for i := range 20 {
		e.Annotations[fmt.Sprintf("k%d", i)] = fmt.Sprint(i)
	}
	want := wire.MarshalEndpoint(e)
	for range 50 {
		if got := wire.MarshalEndpoint(e); string(got) != string(want) {
			t.Fatal("two wire forms of one endpoint")
		}
	}
}
