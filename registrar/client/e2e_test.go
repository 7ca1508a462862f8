package client_test

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/registrar"
	"github.com/switchboard-mesh/switchboard/registrar/client"
	"github.com/switchboard-mesh/switchboard/registry"
)

// The must-show scenarios of the registrar, on real loopback gRPC and a real
// embedded etcd shared by every replica.

type fleet struct {
	clients []*client.Client
	want    []string
}

// converged waits until every client lists exactly want.
func (f *fleet) converged(t *testing.T, wait time.Duration) {
	t.Helper()
	sort.Strings(f.want)
	for i, c := range f.clients {
		eventually(t, wait, fmt.Sprintf("client %d converges to %d endpoints", i, len(f.want)), func() bool {
			return slices.Equal(keysOf(list(t, c, endpoint.Filter{})), f.want)
		})
	}
}

func (f *fleet) register(t *testing.T, i int, eps ...endpoint.Endpoint) {
	t.Helper()
	ops := make([]registry.Op, len(eps))
	for j, e := range eps {
		ops[j] = registry.Register(e)
		f.want = append(f.want, e.Key().String())
	}
	apply(t, f.clients[i], ops...)
}

func clusterOf(i int) string {
	if i < 14 {
		return "east"
	}
	return "west"
}

// Two replicas of east and one of west over one etcd: 20 agents, each writing through
// its own replica, all converge to the same full set, other cluster's included.
func TestE2EReplicasAndClustersConverge(t *testing.T) {
	env := newEtcd(t)
	cfg := func(cluster string) registrar.Config {
		return registrar.Config{Cluster: cluster, Backend: env.backend(t), SyncInterval: time.Second, BatchInterval: 20 * time.Millisecond}
	}
	east1, _ := runServer(t, cfg("east"))
	east2, _ := runServer(t, cfg("east"))
	west1, _ := runServer(t, cfg("west"))
	f := &fleet{}
	for i := range 20 {
		addrs := []string{addr(east1), addr(east2)}
		if i%2 == 1 {
			slices.Reverse(addrs)
		}
		if clusterOf(i) == "west" {
			addrs = []string{addr(west1)}
		}
		f.clients = append(f.clients, newClient(t, client.Options{Addresses: addrs, InOrder: true, Cluster: clusterOf(i), Node: fmt.Sprintf("node-%d", i)}))
	}
	for i := range f.clients {
		var eps []endpoint.Endpoint
		for j := range 5 {
			eps = append(eps, ep(clusterOf(i), fmt.Sprintf("svc%d", j%3), fmt.Sprintf("10.%d.0.%d", i, j), 8080))
		}
		f.register(t, i, eps...)
	}
	f.converged(t, 30*time.Second)
	for _, s := range []*registrar.Server{east1, east2, west1} {
		if got := s.Registrar().Counts(); got["east"] != 70 || got["west"] != 30 {
			t.Fatalf("registrar %s holds %v, want east=70 west=30", addr(s), got)
		}
		if s.Registrar().Watchers() == 0 {
			t.Fatalf("registrar %s serves no watcher: the fleet was not spread", addr(s))
		}
	}
	eventually(t, 10*time.Second, "every write persisted", func() bool { return len(env.stored(t)) == 100 })
}

// A replica dies with writes accepted but not yet persisted. Its agents move to the
// other replica, converge, and lose nothing: they send again what it lost.
func TestE2EKillReplicaLosesNothing(t *testing.T) {
	env := newEtcd(t)
	gated := &gate{Registry: env.backend(t)}
	east1, _ := runServer(t, registrar.Config{Cluster: "east", Backend: gated, SyncInterval: time.Second, BatchInterval: 20 * time.Millisecond})
	east2, _ := runServer(t, registrar.Config{Cluster: "east", Backend: env.backend(t), SyncInterval: time.Second, BatchInterval: 20 * time.Millisecond})
	f := &fleet{}
	var onEast1 []int
	for i := range 8 {
		addrs := []string{addr(east1), addr(east2)}
		if i%2 == 1 {
			slices.Reverse(addrs)
		} else {
			onEast1 = append(onEast1, i)
		}
		f.clients = append(f.clients, newClient(t, client.Options{Addresses: addrs, InOrder: true,
			BackoffMin: 20 * time.Millisecond, BackoffMax: 500 * time.Millisecond}))
		f.register(t, i, ep("east", "web", fmt.Sprintf("10.1.%d.1", i), 80))
	}
	f.converged(t, 30*time.Second)

	// east1 can no longer persist: what its agents write now lives only in its queue.
	gated.shut.Store(true)
	for _, i := range onEast1 {
		f.register(t, i, ep("east", "web", fmt.Sprintf("10.1.%d.2", i), 80))
	}
	if n := east1.Registrar().Pending(); n != len(onEast1) {
		t.Fatalf("east1 holds %d unpersisted writes, want %d", n, len(onEast1))
	}
	east1.Kill()
	f.converged(t, 30*time.Second)
	eventually(t, 20*time.Second, "every write persisted through east2", func() bool {
		return slices.Equal(env.stored(t), f.want)
	})
	if n := east2.Registrar().Watchers(); n != len(f.clients) {
		t.Fatalf("east2 serves %d watchers, want all %d agents", n, len(f.clients))
	}
}

// A registrar restarts (new epoch) while an agent holds a token from before. The
// agent gets a full snapshot and its watchers see exactly what changed meanwhile:
// no duplicate and no missing event.
func TestE2ERestartWithTokenInHand(t *testing.T) {
	env := newEtcd(t)
	cfg := registrar.Config{Cluster: "east", Backend: env.backend(t), SyncInterval: time.Second, BatchInterval: 20 * time.Millisecond}
	srv, stop := runServer(t, cfg)
	address := addr(srv)
	c := newClient(t, client.Options{Addresses: []string{address}, BackoffMin: 20 * time.Millisecond, BackoffMax: 300 * time.Millisecond})
	direct := env.backend(t) // other agents, writing to the backend themselves
	a, b := ep("east", "web", "10.0.0.1", 80), ep("east", "web", "10.0.0.2", 80)
	apply(t, c, registry.Register(a))
	apply(t, direct, registry.Register(b))
	waitReady(t, c)
	eventually(t, 10*time.Second, "b reaches the agent", func() bool { return len(list(t, c, endpoint.Filter{})) == 2 })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch, err := c.Watch(ctx, endpoint.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if evs := drain(t, ch, 300*time.Millisecond); len(evs) != 3 {
		t.Fatalf("initial state %v, want a, b, Synced", eventStrings(evs))
	}
	stop() // graceful: a is persisted

	x := ep("west", "api", "10.0.0.9", 80)
	apply(t, direct, registry.Register(x), registry.Unregister(b))
	cfg.Backend = env.backend(t)
	runServerAt(t, address, cfg)

	var evs []registry.Event
	eventually(t, 30*time.Second, "the agent catches up", func() bool {
		evs = append(evs, drain(t, ch, 50*time.Millisecond)...)
		return len(evs) >= 2
	})
	evs = append(evs, drain(t, ch, 500*time.Millisecond)...)
	got := eventStrings(evs)
	sort.Strings(got)
	want := []string{"added " + x.Key().String(), "removed " + b.Key().String()}
	if !slices.Equal(got, want) {
		t.Fatalf("after the restart the watcher saw %v, want exactly %v", got, want)
	}
	if got := keysOf(list(t, c, endpoint.Filter{})); !slices.Equal(got, keysOf([]endpoint.Endpoint{a, x})) {
		t.Fatalf("List = %v, want a and x", got)
	}
}

// The backend goes down: reads keep coming from the cache, writes are accepted and
// queued, and once the backend is back every accepted write is persisted.
func TestE2EBackendDown(t *testing.T) {
	env := newEtcd(t)
	srv, _ := runServer(t, registrar.Config{Cluster: "east", Backend: env.backend(t), SyncInterval: 200 * time.Millisecond,
		BatchInterval: 20 * time.Millisecond, BackendTimeout: 500 * time.Millisecond})
	c := newClient(t, client.Options{Addresses: []string{addr(srv)}})
	a := ep("east", "web", "10.0.0.1", 80)
	apply(t, c, registry.Register(a))
	waitReady(t, c)
	eventually(t, 10*time.Second, "a persisted", func() bool { return len(env.stored(t)) == 1 })

	env.cluster.Member(0).Stop()
	if got := keysOf(list(t, c, endpoint.Filter{})); len(got) != 1 {
		t.Fatalf("List with the backend down = %v, want the cached a", got)
	}
	var accepted []endpoint.Endpoint
	for i := range 20 {
		e := ep("east", "api", fmt.Sprintf("10.0.1.%d", i), 80)
		apply(t, c, registry.Register(e))
		accepted = append(accepted, e)
	}
	apply(t, c, registry.Unregister(a))
	if n := srv.Registrar().Pending(); n != 21 {
		t.Fatalf("%d writes queued while the backend is down, want 21", n)
	}
	if got := list(t, c, endpoint.Filter{}); !slices.Equal(keysOf(got), keysOf(accepted)) {
		t.Fatalf("List shows %d endpoints, want the 20 accepted ones", len(got))
	}
	time.Sleep(300 * time.Millisecond) // let a few writes and polls fail

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := env.cluster.Member(0).Restart(ctx); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "every accepted write persisted", func() bool {
		return slices.Equal(env.stored(t), keysOf(accepted))
	})
	eventually(t, 10*time.Second, "queue empty", func() bool { return srv.Registrar().Pending() == 0 })
	if got := list(t, c, endpoint.Filter{}); !slices.Equal(keysOf(got), keysOf(accepted)) {
		t.Fatalf("after recovery List shows %d endpoints, want the 20 accepted ones", len(got))
	}
}

// A burst of 10,000 writes with one watcher that does not read: every other watcher
// keeps up, and the slow one converges once it reads again.
func TestE2ESlowWatcherBurst(t *testing.T) {
	env := newEtcd(t)
	srv, _ := runServer(t, registrar.Config{Cluster: "east", Backend: env.backend(t), SyncInterval: 2 * time.Second,
		BatchInterval: 50 * time.Millisecond, History: 1024})
	slow := openSlowWatch(t, addr(srv))
	var watchers []*client.Client
	for range 4 {
		c := newClient(t, client.Options{Addresses: []string{addr(srv)}})
		waitReady(t, c)
		watchers = append(watchers, c)
	}
	const writers, perWriter, perCall = 10, 1000, 10
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wc := newClient(t, client.Options{Addresses: []string{addr(srv)}})
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < perWriter; i += perCall {
				ops := make([]registry.Op, perCall)
				for j := range ops {
					n := i + j
					ops[j] = registry.Register(ep("east", fmt.Sprintf("burst%d", w), fmt.Sprintf("10.%d.%d.%d", w, n/256, n%256), 80))
				}
				if err := wc.Apply(context.Background(), ops); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	const total = writers * perWriter
	for i, c := range watchers {
		eventually(t, 60*time.Second, fmt.Sprintf("watcher %d has all %d", i, total), func() bool {
			return len(list(t, c, endpoint.Filter{})) == total
		})
	}
	// Only now does the slow watcher read.
	if n, resynced := slow.readUntil(t, total, 60*time.Second); n != total || !resynced {
		t.Fatalf("slow watcher ended with %d endpoints (resynced %v), want %d through a resync", n, resynced, total)
	}
	eventually(t, 30*time.Second, "the burst is persisted", func() bool { return len(env.stored(t)) == total })
}
