package node_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/switchboard-mesh/switchboard/dataplane/node"
)

const star = `links:
  - group: cloud
    neighbors: ["*"]
`

// TestTwoGroupsThroughHub: a message published in group a reaches a subscriber in
// group b through the hub group cloud, over real links the control plane made.
func TestTwoGroupsThroughHub(t *testing.T) {
	f := startFabric(t, star, 1, "cloud", "a", "b")
	s := clientOf(t, f, "b/n1").subscribe("org/ns/svc")
	pub := clientOf(t, f, "a/n1")
	ctx := deadline(t, 30*time.Second)
	waitReached(t, ctx, pub, s, "org/ns/svc")
	if _, err := pub.publish(ctx, "org/ns/svc", "hello", false); err != nil {
		t.Fatal(err)
	}
	m, err := s.next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if string(m.GetPayload()) != "hello" || m.GetOrigin() != "a/n1" {
		t.Fatalf("got %q from %s, want hello from a/n1", m.GetPayload(), m.GetOrigin())
	}
}

// collect gathers what each subscription gets within d.
func collect(subs map[string]*sub, d time.Duration) map[string][]string {
	got := map[string][]string{}
	end := time.After(d)
	for {
		progressed := false
		for id, s := range subs {
			select {
			case m, ok := <-s.ch:
				if ok {
					got[id] = append(got[id], string(m.GetPayload()))
					progressed = true
				}
			default:
			}
		}
		select {
		case <-end:
			return got
		default:
		}
		if !progressed {
			time.Sleep(5 * time.Millisecond)
		}
	}
}

// TestStarBroadcastReachesEveryGroupOnce: in a star of four groups with two nodes
// each, a broadcast from one node reaches every subscriber in every group exactly once
// — through the gateways the control plane chose and the peerings within each group.
func TestStarBroadcastReachesEveryGroupOnce(t *testing.T) {
	f := startFabric(t, star, 2, "cloud", "a", "b", "c")
	subs := map[string]*sub{}
	for _, id := range []string{"cloud/n1", "cloud/n2", "a/n2", "b/n1", "b/n2", "c/n1", "c/n2"} {
		subs[id] = clientOf(t, f, id).subscribe("org/ns/svc")
	}
	pub := clientOf(t, f, "a/n1")
	ctx := deadline(t, 30*time.Second)
	// Routes converge one group at a time: probe until every subscriber gets a probe.
	waitAllReached(t, ctx, pub, subs, "org/ns/svc")
	for i := range 20 {
		if _, err := pub.publish(ctx, "org/ns/svc", fmt.Sprint("m", i), true); err != nil {
			t.Fatal(err)
		}
	}
	got := collect(subs, time.Second)
	for id := range subs {
		if len(got[id]) != 20 {
			t.Errorf("%s got %d messages, want each of the 20 once: %v", id, len(got[id]), got[id])
		}
	}
}

// waitAllReached broadcasts probes until every subscription has received one, then
// drains the probes.
func waitAllReached(t *testing.T, ctx context.Context, pub *client, subs map[string]*sub, name string) {
	t.Helper()
	probe(t, ctx, pub, subs, name, true)
}

// waitReached sends anycast probes until s gets one, then drains the probes.
func waitReached(t *testing.T, ctx context.Context, pub *client, s *sub, name string) {
	t.Helper()
	probe(t, ctx, pub, map[string]*sub{"sub": s}, name, false)
}

func probe(t *testing.T, ctx context.Context, pub *client, subs map[string]*sub, name string, broadcast bool) {
	t.Helper()
	reached := map[string]bool{}
	for len(reached) < len(subs) {
		if _, err := pub.publish(ctx, name, "probe", broadcast); err != nil && ctx.Err() != nil {
			t.Fatalf("probes never reached %d of %d subscribers: %v", len(subs)-len(reached), len(subs), err)
		}
		for id, s := range subs {
			select {
			case <-s.ch:
				reached[id] = true
			default:
			}
		}
		select {
		case <-ctx.Done():
			missing := []string{}
			for id := range subs {
				if !reached[id] {
					missing = append(missing, id)
				}
			}
			t.Fatalf("probes never reached %v", missing)
		case <-time.After(50 * time.Millisecond):
		}
	}
	time.Sleep(300 * time.Millisecond)
	for _, s := range subs {
		for len(s.ch) > 0 {
			<-s.ch
		}
	}
}

const chain = `links:
  - group: a
    neighbors: [b]
  - group: b
    neighbors: [c]
  - group: c
    neighbors: [d]
`

// TestChainMultiHop: a message crosses three links of a chain, spending a hop on each.
func TestChainMultiHop(t *testing.T) {
	f := startFabric(t, chain, 1, "a", "b", "c", "d")
	s := clientOf(t, f, "d/n1").subscribe("org/ns/svc")
	pub := clientOf(t, f, "a/n1")
	ctx := deadline(t, 30*time.Second)
	waitReached(t, ctx, pub, s, "org/ns/svc")
	if _, err := pub.publish(ctx, "org/ns/svc", "far", false); err != nil {
		t.Fatal(err)
	}
	m, err := s.next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if string(m.GetPayload()) != "far" {
		t.Fatalf("got %q", m.GetPayload())
	}
	if want := uint32(node.DefaultMaxHops - 3); m.GetTtl() != want {
		t.Fatalf("hops left %d, want %d (three links crossed)", m.GetTtl(), want)
	}
}

const perTenant = `segments:
  - name: segment-$group
    links:
      - group: cloud
        neighbors: [$group]
`

// TestSegmentsIsolateTenants: with one segment per customer, cloud reaches both
// customers, and neither customer reaches the other.
func TestSegmentsIsolateTenants(t *testing.T) {
	f := startFabric(t, perTenant, 1, "cloud", "customer-a", "customer-b")
	ctx := deadline(t, 30*time.Second)
	inB := clientOf(t, f, "customer-b/n1").subscribe("org/ns/b-svc")
	waitReached(t, ctx, clientOf(t, f, "cloud/n1"), inB, "org/ns/b-svc")
	// customer-a has no route to what only customer-b subscribes to: refused at once.
	_, err := clientOf(t, f, "customer-a/n1").publish(ctx, "org/ns/b-svc", "from a", false)
	if status.Code(err) != codes.NotFound {
		t.Fatalf("publish from customer-a to customer-b's name: %v, want NotFound", err)
	}
	// The other way round too.
	inA := clientOf(t, f, "customer-a/n1").subscribe("org/ns/a-svc")
	waitReached(t, ctx, clientOf(t, f, "cloud/n1"), inA, "org/ns/a-svc")
	_, err = clientOf(t, f, "customer-b/n1").publish(ctx, "org/ns/a-svc", "from b", false)
	if status.Code(err) != codes.NotFound {
		t.Fatalf("publish from customer-b to customer-a's name: %v, want NotFound", err)
	}
	// When cloud subscribes too, customer-a's messages travel to cloud and stay there:
	// cloud's own subscriber comes first.
	inCloud := clientOf(t, f, "cloud/n1").subscribe("org/ns/b-svc")
	pubA := clientOf(t, f, "customer-a/n1")
	waitReached(t, ctx, pubA, inCloud, "org/ns/b-svc")
	for range 10 {
		if _, err := pubA.publish(ctx, "org/ns/b-svc", "from a", false); err != nil {
			t.Fatal(err)
		}
	}
	if m := inB.quiet(500 * time.Millisecond); m != nil {
		t.Fatalf("customer-b got %q from %s across the segment boundary", m.GetPayload(), m.GetOrigin())
	}
	// A broadcast from customer-a reaches cloud's subscriber and stops there: cloud's
	// route toward customer-b is in customer-b's segment, not in the one the message
	// came in over.
	for i := range 10 {
		if _, err := pubA.publish(ctx, "org/ns/b-svc", fmt.Sprint("broadcast from a ", i), true); err != nil {
			t.Fatal(err)
		}
		if _, err := inCloud.next(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if m := inB.quiet(500 * time.Millisecond); m != nil {
		t.Fatalf("customer-b got broadcast %q from %s across the segment boundary", m.GetPayload(), m.GetOrigin())
	}
	// cloud itself is in both segments: its broadcasts reach customer-b.
	if _, err := clientOf(t, f, "cloud/n1").publish(ctx, "org/ns/b-svc", "from cloud", true); err != nil {
		t.Fatal(err)
	}
	if m, err := inB.next(ctx); err != nil || string(m.GetPayload()) != "from cloud" {
		t.Fatalf("customer-b, broadcast from cloud: %v %v", m, err)
	}
}
