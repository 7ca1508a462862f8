package client_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/registrar"
	"github.com/switchboard-mesh/switchboard/registrar/client"
	"github.com/switchboard-mesh/switchboard/registry"
)

// restartPair is an agent client of registrar A over etcd, which holds seed
// endpoints; A's backend is gated, so a test can make A accept writes it never
// persists.
type restartPair struct {
	env    *etcdEnv
	gated  *gate
	a      *registrar.Server
	stopA  func()
	client *client.Client
	seed   []endpoint.Endpoint
}

func newRestartPair(t *testing.T) *restartPair {
	t.Helper()
	p := &restartPair{env: newEtcd(t)}
	for i := range 20 {
		p.seed = append(p.seed, ep("east", fmt.Sprintf("svc%d", i%4), fmt.Sprintf("10.2.0.%d", i), 80))
	}
	apply(t, p.env.backend(t), registerOps(p.seed)...)
	p.gated = &gate{Registry: p.env.backend(t)}
	p.a, p.stopA = runServer(t, registrar.Config{Cluster: "east", Backend: p.gated, SyncInterval: time.Second, BatchInterval: 20 * time.Millisecond})
	p.client = newClient(t, client.Options{Addresses: []string{addr(p.a)}, BackoffMin: 20 * time.Millisecond, BackoffMax: 300 * time.Millisecond})
	waitReady(t, p.client)
	return p
}

// startB starts registrar B (a new epoch) on A's address and the same backend,
// ungated, and returns its metrics.
func (p *restartPair) startB(t *testing.T) *prometheus.Registry {
	t.Helper()
	metrics := prometheus.NewRegistry()
	runServerAt(t, addr(p.a), registrar.Config{Cluster: "east", Backend: p.env.backend(t), SyncInterval: time.Second,
		BatchInterval: 20 * time.Millisecond, Metrics: metrics})
	eventually(t, 30*time.Second, "the client's stream completes at B", func() bool {
		return broadcast(t, metrics, "SNAPSHOT_COMPLETE") >= 1 && gauge(t, p.client, "agent_registrar_cache_age_seconds") == 0
	})
	return metrics
}

func registerOps(eps []endpoint.Endpoint) []registry.Op {
	ops := make([]registry.Op, len(eps))
	for i, e := range eps {
		ops[i] = registry.Register(e)
	}
	return ops
}

// A restart after A persisted everything the client wrote: the client resumes at B
// without a snapshot, its cache intact, and writes through B afterwards.
func TestRestartResumesTheCache(t *testing.T) {
	p := newRestartPair(t)
	c := p.client
	mine := ep("east", "own", "10.3.0.1", 80)
	apply(t, c, registry.Register(mine))
	want := append(slices.Clone(p.seed), mine)
	eventually(t, 20*time.Second, "the client's write persisted and confirmed", func() bool {
		return client.Held(c) == len(want) && client.Unconfirmed(c) == 0
	})
	p.stopA()

	metrics := p.startB(t)
	if n := broadcast(t, metrics, "FULL_SNAPSHOT"); n != 0 {
		t.Fatalf("B sent %v endpoints of full snapshots to a client whose cache was its state", n)
	}
	if got := keysOf(list(t, c, endpoint.Filter{})); !slices.Equal(got, keysOf(want)) {
		t.Fatalf("after resuming, List = %v, want %v", got, keysOf(want))
	}
	later := ep("east", "own", "10.3.0.2", 80)
	apply(t, c, registry.Register(later))
	want = append(want, later)
	eventuallyEqual(t, 20*time.Second, "the backend", func() []string { return p.env.stored(t) }, keysOf(want))
	eventuallyEqual(t, 10*time.Second, "the client's cache", func() []string { return keysOf(list(t, c, endpoint.Filter{})) }, keysOf(want))
	if n := broadcast(t, metrics, "FULL_SNAPSHOT"); n != 0 {
		t.Fatalf("B sent %v endpoints of full snapshots", n)
	}
}

// A restart after A accepted a write it never persisted: the client's token counts
// the write, B's state lacks it, so the digests differ: a full snapshot, and the
// client sends the write again.
func TestRestartAfterALostWriteResends(t *testing.T) {
	p := newRestartPair(t)
	c := p.client
	p.gated.shut.Store(true)
	lost := ep("east", "own", "10.3.0.9", 80)
	apply(t, c, registry.Register(lost))
	eventually(t, 20*time.Second, "the client's stream shows the write", func() bool { return client.Held(c) == len(p.seed)+1 })
	if n := p.a.Registrar().Pending(); n != 1 {
		t.Fatalf("A holds %d unpersisted writes, want 1", n)
	}
	p.a.Kill()

	metrics := p.startB(t)
	if n := broadcast(t, metrics, "FULL_SNAPSHOT"); n != float64(len(p.seed)) {
		t.Fatalf("B sent %v endpoints of full snapshots, want one snapshot of the %d it holds", n, len(p.seed))
	}
	want := keysOf(append(slices.Clone(p.seed), lost))
	eventuallyEqual(t, 20*time.Second, "the backend", func() []string { return p.env.stored(t) }, want)
	eventuallyEqual(t, 10*time.Second, "the client's cache", func() []string { return keysOf(list(t, c, endpoint.Filter{})) }, want)
}
