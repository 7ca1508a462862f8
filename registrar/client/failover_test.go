package client_test

import (
	"context"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/switchboard-mesh/switchboard/endpoint"
	registrarv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/registrar/v1"
	"github.com/switchboard-mesh/switchboard/registrar/client"
	"github.com/switchboard-mesh/switchboard/registry"
)

// Failover with registrar replicas in processes of their own, SIGKILLed with
// writes accepted but not persisted: replica a never flushes (its batch interval
// is an hour), replica b persists at once.

func failoverPair(t *testing.T, env *etcdEnv) (a, b *replicaProc) {
	t.Helper()
	cfg := childConfig{etcd: strings.Join(env.cluster.Endpoints(), ","), prefix: env.prefix, cluster: "east"}
	never, prompt := cfg, cfg
	never.batchInterval, never.batchSize = time.Hour, 1<<20
	prompt.batchInterval, prompt.batchSize = 20*time.Millisecond, 50
	return startReplica(t, never), startReplica(t, prompt)
}

// waitForEvent reads a raw watch stream of address until an event about e of type
// typ arrives: by then the registrar has sent it, with its persisted frontier, to
// every watcher that was caught up.
func waitForEvent(t *testing.T, address string, typ registrarv1.EndpointEvent_EventType, e endpoint.Endpoint) {
	t.Helper()
	conn, err := grpc.NewClient(address, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	st, err := registrarv1.NewRegistrarClient(conn).WatchEndpoints(ctx, &registrarv1.WatchEndpointsRequest{NodeName: "probe"})
	if err != nil {
		t.Fatal(err)
	}
	for {
		ev, err := st.Recv()
		if err != nil {
			t.Fatalf("waiting for %s of %s: %v", typ, e.Key(), err)
		}
		if ev.GetType() == typ && keyOf(ev.GetEndpoint()) == e.Key() {
			return
		}
		for _, p := range ev.GetEndpoints() { // a snapshot that already holds it
			if typ == registrarv1.EndpointEvent_ENDPOINT_ADDED && keyOf(p) == e.Key() {
				return
			}
		}
	}
}

// eventuallyEqual waits until get returns want, or fails saying what it returned.
func eventuallyEqual(t *testing.T, wait time.Duration, what string, get func() []string, want []string) {
	t.Helper()
	var got []string
	deadline := time.Now().Add(wait)
	for got = get(); !slices.Equal(got, want); got = get() {
		if time.Now().After(deadline) {
			t.Fatalf("%s holds %v after %s, want %v", what, got, wait, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func keysOfEps(eps ...endpoint.Endpoint) []string {
	out := make([]string, len(eps))
	for i, e := range eps {
		out[i] = e.Key().String()
	}
	sort.Strings(out)
	return out
}

// An agent's TTL refresh repeats its last write unchanged. A replica that dies
// before persisting must not have told the agent that the repeated write is
// persisted: after the failover the backend and the agent's cache still hold
// what the agent wrote last.
func TestFailoverKeepsRepeatedWrites(t *testing.T) {
	e1 := ep("east", "web", "10.0.0.1", 80)
	e2 := ep("east", "web", "10.0.0.2", 80)
	e3 := ep("east", "web", "10.0.0.3", 80)
	for _, tc := range []struct {
		name   string
		seed   []endpoint.Endpoint // persisted before the agent writes
		writes []registry.Op
		want   []string
	}{
		{
			name:   "repeated register",
			writes: []registry.Op{registry.Register(e1), registry.Register(e1), registry.Register(e2)},
			want:   keysOfEps(e1, e2),
		},
		{
			name:   "repeated unregister",
			seed:   []endpoint.Endpoint{e3},
			writes: []registry.Op{registry.Unregister(e3), registry.Unregister(e3), registry.Register(e2)},
			want:   keysOfEps(e2),
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := newEtcd(t)
			for _, e := range tc.seed {
				apply(t, env.backend(t), registry.Register(e))
			}
			a, b := failoverPair(t, env)
			c := newClient(t, client.Options{Addresses: []string{a.addr, b.addr}, InOrder: true,
				BackoffMin: 20 * time.Millisecond, BackoffMax: 500 * time.Millisecond})
			waitReady(t, c)
			eventually(t, 20*time.Second, "the client sees the seeded endpoints", func() bool {
				return len(list(t, c, endpoint.Filter{})) == len(tc.seed)
			})
			for _, op := range tc.writes {
				apply(t, c, op)
			}
			waitForEvent(t, a.addr, registrarv1.EndpointEvent_ENDPOINT_ADDED, e2)
			time.Sleep(300 * time.Millisecond) // the agent's own stream gets it too

			a.kill()
			eventuallyEqual(t, 30*time.Second, "the backend", func() []string { return env.stored(t) }, tc.want)
			eventuallyEqual(t, 10*time.Second, "the agent's cache", func() []string { return keysOf(list(t, c, endpoint.Filter{})) }, tc.want)
		})
	}
}

// refuser fails calls of one method with Unavailable while on, as a replica that
// is still starting would, and counts the calls it refused.
type refuser struct {
	method  string
	on      atomic.Bool
	refused atomic.Int64
}

func (r *refuser) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if r.on.Load() && strings.HasSuffix(method, "/"+r.method) {
		r.refused.Add(1)
		return status.Error(codes.Unavailable, "refused by the test")
	}
	return invoker(ctx, method, req, reply, cc, opts...)
}

// After a failover the client sends again what the dead replica lost. If the agent
// writes the same key meanwhile and that write is acknowledged first, the re-send
// is stale: it must not land after it.
func TestFailoverResendNeverOverwritesANewerWrite(t *testing.T) {
	k := ep("east", "web", "10.0.0.1", 80)
	for _, tc := range []struct {
		name    string
		seed    bool        // k is persisted before the lost write
		lost    registry.Op // accepted by the replica that dies
		newer   registry.Op // written after the failover, while the re-send fails
		refuse  string      // the method whose calls fail meanwhile: the re-send's
		wantHas bool
	}{
		{name: "removal stays removed", lost: registry.Register(k), newer: registry.Unregister(k), refuse: "RegisterEndpoint"},
		{name: "registration stays registered", seed: true, lost: registry.Unregister(k), newer: registry.Register(k), refuse: "UnregisterEndpoint", wantHas: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := newEtcd(t)
			if tc.seed {
				apply(t, env.backend(t), registry.Register(k))
			}
			a, b := failoverPair(t, env)
			ref := &refuser{method: tc.refuse}
			c := newClient(t, client.Options{Addresses: []string{a.addr, b.addr}, InOrder: true,
				BackoffMin: 100 * time.Millisecond, BackoffMax: 200 * time.Millisecond,
				DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(ref.intercept)}})
			waitReady(t, c)
			eventually(t, 20*time.Second, "the client sees the seed", func() bool {
				return (len(list(t, c, endpoint.Filter{})) == 1) == tc.seed
			})
			apply(t, c, tc.lost)

			ref.on.Store(true)
			a.kill()
			eventually(t, 30*time.Second, "the client re-sends the lost write", func() bool { return ref.refused.Load() > 0 })
			apply(t, c, tc.newer)
			ref.on.Store(false)
			// Give a stale re-send several backoff rounds to land.
			time.Sleep(time.Second)

			var want []string
			if tc.wantHas {
				want = []string{k.Key().String()}
			}
			eventuallyEqual(t, 10*time.Second, "the backend", func() []string { return env.stored(t) }, want)
			if got := keysOf(list(t, c, endpoint.Filter{})); !slices.Equal(got, want) {
				t.Fatalf("the client's cache holds %v, want %v", got, want)
			}
			time.Sleep(500 * time.Millisecond)
			if got := env.stored(t); !slices.Equal(got, want) {
				t.Fatalf("the backend holds %v, want %v: a stale re-send landed after the newer write", got, want)
			}
		})
	}
}
