package client_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/internal/embednats"
	"github.com/switchboard-mesh/switchboard/registrar/client"
	"github.com/switchboard-mesh/switchboard/registry"
	sbjs "github.com/switchboard-mesh/switchboard/registry/jetstream"
)

// Liveness held by the registrar: an agent keeps its entries alive by keeping its
// watch stream open, not by registering them again. Replicas run as processes of
// their own on a real etcd or nats-server; none of these agents ever refreshes.

const (
	heldTTL     = 2 * time.Second // the entries' TTL
	replicaHold = 4 * time.Second // each replica's --liveness-ttl
)

// heldBackend is the registry the replicas of a liveness test share: each replica
// is a process of its own on it.
type heldBackend interface {
	replica() childConfig // the backend's part of a replica's configuration
	stored(t *testing.T) []string
}

func (e *etcdEnv) replica() childConfig {
	return childConfig{etcd: strings.Join(e.cluster.Endpoints(), ","), prefix: e.prefix}
}

// natsEnv is a nats-server with JetStream, the registry stream created by the
// first replica.
type natsEnv struct {
	url    string
	maxAge time.Duration // the stream's; 0: the default
}

func newNATS(t *testing.T) *natsEnv {
	t.Helper()
	ns, err := embednats.Start(testCtx(t), embednats.Options{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Shutdown)
	return &natsEnv{url: ns.ClientURL()}
}

func (e *natsEnv) replica() childConfig { return childConfig{nats: e.url, maxAge: e.maxAge} }

// stored reads what the stream holds, through a connection of its own.
func (e *natsEnv) stored(t *testing.T) []string {
	t.Helper()
	nc, err := nats.Connect(e.url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	return storedIn(t, func(ctx context.Context) (*registry.Front, error) {
		return sbjs.New(ctx, nc, sbjs.Options{CreateStream: true})
	})
}

// onHeldBackends runs test on etcd and on JetStream, the backends that hold.
func onHeldBackends(t *testing.T, test func(t *testing.T, env heldBackend)) {
	t.Run("etcd", func(t *testing.T) { test(t, newEtcd(t)) })
	t.Run("jetstream", func(t *testing.T) { test(t, newNATS(t)) })
}

func heldReplica(t *testing.T, env heldBackend) *replicaProc {
	t.Helper()
	cfg := env.replica()
	cfg.cluster, cfg.batchInterval, cfg.batchSize, cfg.livenessTTL = "east", 20*time.Millisecond, 50, replicaHold
	return startReplica(t, cfg)
}

func heldClient(t *testing.T, addrs ...string) *client.Client {
	t.Helper()
	c := newClient(t, client.Options{Addresses: addrs, InOrder: true, BackoffMin: 20 * time.Millisecond, BackoffMax: 300 * time.Millisecond})
	waitReady(t, c)
	return c
}

func heldEndpoint(addr string) endpoint.Endpoint {
	e := ep("east", "web", addr, 80)
	e.TTL = endpoint.TTL(heldTTL)
	return e
}

// registerHeld has a client of the replicas at addrs register one entry at addr,
// and waits until the backend stores it.
func registerHeld(t *testing.T, env heldBackend, addr string, addrs ...string) (*client.Client, endpoint.Endpoint) {
	t.Helper()
	c := heldClient(t, addrs...)
	e := heldEndpoint(addr)
	apply(t, c, registry.Register(e))
	eventually(t, 10*time.Second, "the entry is stored", func() bool { return slices.Contains(env.stored(t), e.Key().String()) })
	return c, e
}

// stays fails the test if what the backend stores ever lacks e during d, sampled
// often.
func stays(t *testing.T, env heldBackend, e endpoint.Endpoint, d time.Duration, what string) {
	t.Helper()
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		if !slices.Contains(env.stored(t), e.Key().String()) {
			t.Fatalf("%s: %s is gone from the backend", what, e.Key())
		}
	}
}

// goneWithin waits until the backend no longer stores e, and fails after bound.
func goneWithin(t *testing.T, env heldBackend, e endpoint.Endpoint, bound time.Duration, what string) time.Duration {
	t.Helper()
	start := time.Now()
	eventually(t, bound, what, func() bool { return !slices.Contains(env.stored(t), e.Key().String()) })
	return time.Since(start)
}

// An agent that never refreshes keeps its entry past the entry's TTL while its
// stream is open, and past its registrar's SIGKILL: it re-homes to the other
// replica, which takes the entry over before the dead one's hold runs out. (With
// the replicas holding nothing, as before liveness was held, the entry expires
// after its TTL.)
func TestLiveAgentsEntrySurvivesItsRegistrarsDeath(t *testing.T) {
	onHeldBackends(t, testLiveAgentsEntrySurvivesItsRegistrarsDeath)
}

func testLiveAgentsEntrySurvivesItsRegistrarsDeath(t *testing.T, env heldBackend) {
	a, b := heldReplica(t, env), heldReplica(t, env)
	c, e := registerHeld(t, env, "10.0.0.1", a.addr, b.addr)
	stays(t, env, e, 2*heldTTL, "before the replica's death, with no refresh")

	a.kill()
	// Past the dead replica's hold and the entry's TTL, twice over.
	stays(t, env, e, 2*(replicaHold+heldTTL), "after the replica the agent wrote through was killed")
	if got := keysOf(list(t, c, endpoint.Filter{})); !slices.Equal(got, []string{e.Key().String()}) {
		t.Fatalf("the agent's cache holds %v", got)
	}
}

// An agent that dies (its stream ends) has its entries removed within their TTL
// plus the replica's sweep, although it kept them past their TTL while alive.
func TestDeadAgentsEntryExpiresWithinTheBound(t *testing.T) {
	onHeldBackends(t, testDeadAgentsEntryExpiresWithinTheBound)
}

func testDeadAgentsEntryExpiresWithinTheBound(t *testing.T, env heldBackend) {
	a := heldReplica(t, env)
	c, e := registerHeld(t, env, "10.0.0.2", a.addr)
	stays(t, env, e, 2*heldTTL, "while the agent lives, with no refresh")

	c.Close()
	// The bound: the entry's TTL after the stream ends, plus one sweep (1 s) and the
	// removal's round trip.
	took := goneWithin(t, env, e, heldTTL+3*time.Second, "the dead agent's entry is removed")
	if took < heldTTL-200*time.Millisecond {
		t.Fatalf("the dead agent's entry went %s after its stream ended, before its TTL (%s)", took, heldTTL)
	}
	t.Logf("the dead agent's entry went %s after its stream ended (TTL %s)", took, heldTTL)
}

// An agent that dies with its registrar leaves entries nobody takes over: they go
// when the dead replica's hold runs out (on JetStream, removed by a replica that
// lives on).
func TestEntriesOfAnAgentDeadWithItsRegistrarGoWithTheHold(t *testing.T) {
	onHeldBackends(t, testEntriesOfAnAgentDeadWithItsRegistrarGoWithTheHold)
}

func testEntriesOfAnAgentDeadWithItsRegistrarGoWithTheHold(t *testing.T, env heldBackend) {
	a := heldReplica(t, env)
	// Another replica lives on: on JetStream it is a holding replica that removes
	// the entries of a hold gone (a stream has no leases of its own).
	_ = heldReplica(t, env)
	c, e := registerHeld(t, env, "10.0.0.3", a.addr)
	a.kill()
	c.Close()
	took := goneWithin(t, env, e, replicaHold+3*time.Second, "the orphan entry goes with the dead replica's hold")
	t.Logf("the orphan entry went %s after its replica's SIGKILL (hold %s)", took, replicaHold)
}

// On JetStream a held entry also expires on its own after the stream's MaxAge (for
// readers that know nothing of holds): its replica writes it again in time, so it
// lives on past several MaxAges while its agent, which never refreshes, lives.
func TestHeldEntryOutlivesTheStreamsMaxAge(t *testing.T) {
	env := newNATS(t)
	env.maxAge = 8 * time.Second
	a := heldReplica(t, env)
	_, e := registerHeld(t, env, "10.0.0.5", a.addr)
	stays(t, env, e, 3*env.maxAge, "past the stream's MaxAge, held")
}

// Refreshes of a held entry reach neither the registrar nor the backend: etcd's
// revision does not move while the agent registers it again and again.
func TestRefreshesOfAHeldEntryWriteNothing(t *testing.T) {
	env := newEtcd(t)
	a := heldReplica(t, env)
	c, e := registerHeld(t, env, "10.0.0.4", a.addr)
	time.Sleep(500 * time.Millisecond) // the registrar's answer marked it held
	before := revision(t, env)
	for range 5 { // each a batch of its own, were it sent (the batch interval is 20 ms)
		apply(t, c, registry.Register(e))
		time.Sleep(100 * time.Millisecond)
	}
	changed := e
	changed.Weight = 7
	apply(t, c, registry.Register(changed))
	eventually(t, 10*time.Second, "the change is stored", func() bool { return revision(t, env) > before })
	if got := revision(t, env); got != before+1 {
		t.Fatalf("etcd's revision moved from %d to %d: refreshes were written (want one write, the change)", before, got)
	}
}

// revision is etcd's current revision.
func revision(t *testing.T, env *etcdEnv) int64 {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: env.cluster.Endpoints(), DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := cli.Get(ctx, "revision-probe")
	if err != nil {
		t.Fatal(err)
	}
	return resp.Header.Revision
}
