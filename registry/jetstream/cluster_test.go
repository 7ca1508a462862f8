package jetstream_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/internal/embednats"
	"github.com/switchboard-mesh/switchboard/registry"
	sbjs "github.com/switchboard-mesh/switchboard/registry/jetstream"
)

// TestThreeNodeCluster is what users run when one machine is not enough: an R3 stream
// on three servers. Losing the stream leader does not stop registrations, lookups or
// an open watch; the restarted server catches up and then carries the quorum when a
// second server goes down.
func TestThreeNodeCluster(t *testing.T) {
	ctx := testCtx(t, 120*time.Second)
	c, err := embednats.StartCluster(ctx, embednats.ClusterConfig{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Shutdown()
	nc := connect(t, c.ClientURL())
	js := newJS(t, nc)
	cfg := freshStream()
	cfg.Replicas = 3
	r := openRegistry(t, nc, sbjs.Options{Stream: cfg, Logger: testLogger(t)})
	readYourWrites(t, ctx, r)
	mustApply(t, ctx, r, batch(0, 100)...)
	ch, err := r.Watch(ctx, endpoint.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	for n := 0; n < 100; n++ {
		expectEvent(t, ch, 10*time.Second, registry.Added, batch(n, 1)[0].Endpoint.Key())
	}
	expectEvent(t, ch, 10*time.Second, registry.Synced, endpoint.Key{})

	down := streamLeader(t, c, js, cfg.Name)
	c.Stop(down)
	applyEventually(t, r, batch(100, 100))
	listEventually(t, r, 200)
	// The watch survives the failover: the new entries arrive (in whatever order the
	// retried batch landed), nothing is repeated or removed.
	want := map[endpoint.Key]bool{}
	for _, op := range batch(100, 100) {
		want[op.Endpoint.Key()] = true
	}
	for len(want) > 0 {
		ev := nextEvent(t, ch, 20*time.Second)
		if ev.Type != registry.Added || !want[ev.Endpoint.Key()] {
			t.Fatalf("after failover: unexpected %s %s", ev.Type, ev.Endpoint.Key())
		}
		delete(want, ev.Endpoint.Key())
	}

	if err := c.Restart(ctx, down); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	name := c.Server(down).Name()
	eventually(t, 60*time.Second, name+" catches up", func() bool { return caughtUp(t, js, cfg.Name, name) })

	// With another server down, writes need the restarted one for a quorum.
	c.Stop((down + 1) % 3)
	applyEventually(t, r, batch(200, 100))
	listEventually(t, r, 300)
}

// readYourWrites: a filtered lookup right after an acknowledged write sees it, even
// though a follower that has not applied the write yet may answer its direct get.
// The entries it writes are gone again when it returns.
func readYourWrites(t *testing.T, ctx context.Context, r *registry.Front) {
	t.Helper()
	const n = 60
	var ops []registry.Op
	for i := range n {
		e := ep("prod", "ryw", "http", ipv4(i), 80)
		mustApply(t, ctx, r, registry.Register(e))
		ops = append(ops, registry.Unregister(e))
		if got := mustList(t, ctx, r, endpoint.Filter{Service: "ryw"}); len(got) != i+1 {
			t.Fatalf("List right after registering entry %d = %d entries, want %d", i+1, len(got), i+1)
		}
	}
	t.Logf("%d of %d lookups fell back from multi_last to the consumer", sbjs.Fallbacks(r), n)
	mustApply(t, ctx, r, ops...)
	if got := mustList(t, ctx, r, endpoint.Filter{Service: "ryw"}); len(got) != 0 {
		t.Fatalf("List after unregistering = %d entries, want none", len(got))
	}
}

// batch registers n endpoints numbered from first.
func batch(first, n int) []registry.Op {
	ops := make([]registry.Op, n)
	for i := range n {
		ops[i] = registry.Register(ep("prod", serviceName((first+i)%5), "http", ipv4(first+i), 80))
	}
	return ops
}

// applyEventually retries while the cluster elects new leaders.
func applyEventually(t *testing.T, r registry.Registry, ops []registry.Op) {
	t.Helper()
	var err error
	eventually(t, 30*time.Second, "Apply succeeds", func() bool {
		ctx := testCtx(t, 5*time.Second)
		err = r.Apply(ctx, ops)
		return err == nil
	})
}

func listEventually(t *testing.T, r registry.Registry, want int) {
	t.Helper()
	var got []endpoint.Endpoint
	eventually(t, 30*time.Second, fmt.Sprintf("List returns %d entries", want), func() bool {
		var err error
		got, err = r.List(testCtx(t, 5*time.Second), endpoint.Filter{})
		return err == nil && len(got) == want
	})
}

func streamLeader(t *testing.T, c *embednats.Cluster, js jetstream.JetStream, stream string) int {
	t.Helper()
	var idx = -1
	eventually(t, 20*time.Second, "stream has a leader", func() bool {
		info, err := streamInfo(t, js, stream)
		if err != nil || info.Cluster == nil {
			return false
		}
		for i := range c.Size() {
			if s := c.Server(i); s != nil && s.Name() == info.Cluster.Leader {
				idx = i
			}
		}
		return idx >= 0
	})
	return idx
}

// caughtUp reports whether server is a current follower with no lag.
func caughtUp(t *testing.T, js jetstream.JetStream, stream, server string) bool {
	info, err := streamInfo(t, js, stream)
	if err != nil || info.Cluster == nil {
		return false
	}
	if info.Cluster.Leader == server {
		return true
	}
	for _, p := range info.Cluster.Replicas {
		if p.Name == server {
			return p.Current && p.Lag == 0 && !p.Offline
		}
	}
	return false
}

func streamInfo(t *testing.T, js jetstream.JetStream, stream string) (*jetstream.StreamInfo, error) {
	ctx := testCtx(t, 3*time.Second)
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return nil, err
	}
	return s.Info(ctx)
}
