package node_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/switchboard-mesh/switchboard/controlplane/store"
	"github.com/switchboard-mesh/switchboard/dataplane"
	"github.com/switchboard-mesh/switchboard/dataplane/node"
	controlplanev1 "github.com/switchboard-mesh/switchboard/gen/switchboard/controlplane/v1"
	"github.com/switchboard-mesh/switchboard/internal/embednats"
	"github.com/switchboard-mesh/switchboard/internal/fabric"
	"github.com/switchboard-mesh/switchboard/registry"
	_ "github.com/switchboard-mesh/switchboard/registry/jetstream" // the registry nodes of different processes share
)

const pairAB = "links:\n  - group: a\n    neighbors: [b]\n"

// nodeChildConfig is the config file of a node run as a child process.
func nodeChildConfig(group, id, listen, health, south, extra string) string {
	return fmt.Sprintf(`node_id: %s
group: %s
listen: %s
external_endpoint: %s
health_listen: %s
control_plane: [%s]
link_grace: 3s
%s`, id, group, listen, listen, health, south, extra)
}

// jetstreamRegistry runs an embedded NATS JetStream server and opens the registry the
// nodes of a group share across processes.
func jetstreamRegistry(t *testing.T) (registry.Registry, string) {
	t.Helper()
	ctx := deadline(t, 30*time.Second)
	ns, err := embednats.Start(ctx, embednats.Options{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Shutdown)
	reg, err := registry.Open(ctx, "jetstream", map[string]string{"nats-url": ns.ClientURL()}, testLogger())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = reg.Close() })
	return reg, ns.ClientURL()
}

// waitLinkClaimed waits until the link between groups g and other is claimed and
// returns the node of g holding it.
func waitLinkClaimed(t *testing.T, ctx context.Context, f *fabric.Fabric, g, other string) string {
	t.Helper()
	for {
		links, err := f.ControlPlane().Store().ListLinks(ctx, store.LinkFilter{})
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range links {
			if l.Deleted || l.Status != store.LinkApplied || l.DestNodeID == "" {
				continue
			}
			switch {
			case l.SourceGroup == g && l.DestGroup == other:
				return l.SourceNodeID
			case l.DestGroup == g && l.SourceGroup == other:
				return l.DestNodeID
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no claimed link between %s and %s", g, other)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// TestGatewayProcessKilled: the gateway of the subscriber's group runs as a process of
// its own and is SIGKILLed while a publisher in another group sends a steady stream.
// The control plane moves the link to the sibling and delivery resumes. Every message
// the publisher's node accepted is delivered or counted as dropped by a node that is
// still alive: what died inside the gateway is counted by the node that sent it there
// and never got its ack (reason "unacked").
func TestGatewayProcessKilled(t *testing.T) {
	reg, natsURL := jetstreamRegistry(t)
	f := startFabricWith(t, fabric.Options{Topology: pairAB, Registry: reg, Node: func(c *node.Config) {
		c.HealthListen = "127.0.0.1:0"
	}}, 0)
	ctx := deadline(t, 90*time.Second)
	if _, err := f.StartNode(ctx, "a", "n1"); err != nil {
		t.Fatal(err)
	}
	// b/n1 comes first, alone in its group, so the link to a lands on it.
	health := freeAddr(t)
	gw := startChild(t, "b-n1", "node", nodeChildConfig("b", "n1", freeAddr(t), health, f.ControlPlane().SouthboundAddr(),
		fmt.Sprintf("registry: {backend: jetstream, params: {nats-url: %q}}\n", natsURL)))
	waitHTTP(t, ctx, "http://"+health+"/readyz")
	if holder := waitLinkClaimed(t, ctx, f, "b", "a"); holder != "b/n1" {
		t.Fatalf("the link to a is held by %s, want b/n1", holder)
	}
	if _, err := f.StartNode(ctx, "b", "n2"); err != nil {
		t.Fatal(err)
	}
	s := clientOf(t, f, "b/n2").subscribe("org/ns/steady")
	pub := clientOf(t, f, "a/n1")
	waitReached(t, ctx, pub, s, "org/ns/steady")

	survivors := []string{f.Node("a/n1").HealthAddr(), f.Node("b/n2").HealthAddr()}
	dropsBefore, _ := droppedAt(t, survivors...)

	st := startSteady(ctx, pub, s, "org/ns/steady", 2*time.Millisecond)
	st.waitDelivered(t, ctx, time.Time{}, 50, "before the kill")
	gw.kill()
	killed := time.Now()
	st.waitDelivered(t, ctx, killed, 50, "delivery after the gateway was killed")
	st.finish(ctx, 2*time.Second)

	dropsAfter, byReason := droppedAt(t, survivors...)
	counted := dropsAfter - dropsBefore
	gap, accepted, delivered, lost := st.report(killed)
	t.Logf("gateway b/n1 SIGKILLed: delivery gap %s; %d accepted, %d delivered, %d lost, %d counted dropped by the survivors (%v); %d refused (nobody reachable)",
		gap.Round(time.Millisecond), accepted, delivered, lost, counted, byReason, st.refused)
	if st.dups > 0 {
		t.Errorf("%d messages delivered twice", st.dups)
	}
	if lost > counted {
		t.Fatalf("%d accepted messages lost but only %d counted as dropped: %d lost silently", lost, counted, lost-counted)
	}
}

// TestNodeProcessRestarted: the subscriber's node runs as a process of its own; it is
// SIGKILLed and started again with the same config, and messages reach its new
// subscriber.
func TestNodeProcessRestarted(t *testing.T) {
	f := startFabric(t, pairAB, 1, "a")
	ctx := deadline(t, 60*time.Second)
	listen, health := freeAddr(t), freeAddr(t)
	b := startChild(t, "b-n1", "node", nodeChildConfig("b", "n1", listen, health, f.ControlPlane().SouthboundAddr(), ""))
	waitHTTP(t, ctx, "http://"+health+"/readyz")
	pub := clientOf(t, f, "a/n1")
	sc := dial(t, listen)
	waitReached(t, ctx, pub, sc.subscribe("org/ns/svc"), "org/ns/svc")

	b.kill()
	killed := time.Now()
	b.start()
	waitHTTP(t, ctx, "http://"+health+"/readyz")
	s := sc.subscribe("org/ns/svc")
	waitReached(t, ctx, pub, s, "org/ns/svc")
	t.Logf("node b/n1 SIGKILLed and started again: delivery to a new subscriber after %s", time.Since(killed).Round(time.Millisecond))
	for i := range 20 {
		if _, err := pub.publish(ctx, "org/ns/svc", fmt.Sprint("after", i), false); err != nil {
			t.Fatalf("publish after the restart: %v", err)
		}
		m, err := s.next(ctx)
		if err != nil || string(m.GetPayload()) != fmt.Sprint("after", i) {
			t.Fatalf("message %d after the restart: %v %v", i, m, err)
		}
	}
}

// controlPlaneChildConfig is a control plane in config mode (a <-> b), in memory: a
// restart wipes it, and every link comes back under a new id.
func controlPlaneChildConfig(south, north string) string {
	return fmt.Sprintf(`northbound: {endpoint: %q}
southbound: {endpoint: %q}
database: {type: in_memory}
topology:
  links:
    - group: a
      neighbors: [b]
reconciler: {base_retry_delay: 20ms, reconcile_period: 5s, max_requeues: 15, workers: 4}
`, north, south)
}

// linkOf waits until a node has one control-plane connection (a leftover of the
// registration race is deleted by the next reconcile pass) and returns it.
func linkOf(t *testing.T, ctx context.Context, r *fabric.Running) dataplane.ConnInfo {
	t.Helper()
	for {
		cs := r.Connections()
		if len(cs) == 1 {
			return cs[0]
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s has connections %+v, want one", r.ID(), cs)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// TestControlPlaneProcessKilled: the control plane runs as a process of its own and is
// SIGKILLed while a steady stream flows from a to b; delivery goes on over the link
// while it is down. It is started again — empty: the link comes back under a new id —
// and both nodes hand their connection over to the new link, which b claims: the same
// connections, no message lost.
func TestControlPlaneProcessKilled(t *testing.T) {
	south, north := freeAddr(t), freeAddr(t)
	cp := startChild(t, "controlplane", "controlplane", controlPlaneChildConfig(south, north))
	ctx := deadline(t, 90*time.Second)
	waitTCP(t, ctx, south)
	f := startFabricWith(t, fabric.Options{Southbound: south, Node: func(c *node.Config) {
		c.HealthListen = "127.0.0.1:0"
		if c.Group == "a" {
			// a only dials (an edge behind NAT): the link is a -> b in every life of the
			// control plane, whichever node registers first after the restart.
			c.ExternalEndpoint = ""
		}
	}}, 1, "a", "b")
	pub := clientOf(t, f, "a/n1")
	s := clientOf(t, f, "b/n1").subscribe("org/ns/svc")
	waitReached(t, ctx, pub, s, "org/ns/svc")
	na, nb := f.Node("a/n1"), f.Node("b/n1")
	before := map[string]dataplane.ConnInfo{"a/n1": linkOf(t, ctx, na), "b/n1": linkOf(t, ctx, nb)}
	dropsBefore, _ := droppedAt(t, na.HealthAddr(), nb.HealthAddr())

	st := startSteady(ctx, pub, s, "org/ns/svc", 2*time.Millisecond)
	time.Sleep(200 * time.Millisecond)
	cp.kill()
	killed := time.Now()
	time.Sleep(time.Second)
	if !st.deliveredAfter(killed.Add(100 * time.Millisecond)) {
		t.Fatal("no message delivered while the control plane was down")
	}
	cp.start()
	waitTCP(t, ctx, south)
	// The link comes back under a new id on both ends, over the same connections.
	for _, r := range []*fabric.Running{na, nb} {
		for {
			c := linkOf(t, ctx, r)
			if c.LinkID != before[r.ID()].LinkID {
				if c.ID != before[r.ID()].ID {
					t.Fatalf("%s: connection %d replaced by %d, want it handed over", r.ID(), before[r.ID()].ID, c.ID)
				}
				break
			}
			select {
			case <-ctx.Done():
				t.Fatalf("%s still on link %s after the control plane restarted", r.ID(), c.LinkID)
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	newLink := linkOf(t, ctx, na).LinkID
	if got := linkOf(t, ctx, nb).LinkID; got != newLink {
		t.Fatalf("a/n1 is on link %s, b/n1 on %s", newLink, got)
	}
	waitClaimed(t, ctx, north, newLink)
	// Delivery over the handed-over link, routes re-installed by the new control plane.
	restarted := time.Now()
	time.Sleep(500 * time.Millisecond)
	st.finish(ctx, 2*time.Second)
	if !st.deliveredAfter(restarted) {
		t.Fatal("nothing delivered after the control plane came back")
	}
	gap, accepted, delivered, lost := st.report(killed)
	dropsAfter, byLabels := droppedAt(t, na.HealthAddr(), nb.HealthAddr())
	t.Logf("control plane SIGKILLed and restarted: %d accepted, %d delivered, %d lost, %d counted dropped (%v), %d refused as unroutable; gap around the kill %s",
		accepted, delivered, lost, dropsAfter-dropsBefore, byLabels, st.refused, gap.Round(time.Millisecond))
	if st.dups > 0 {
		t.Fatalf("%d messages duplicated across the control-plane restart", st.dups)
	}
	if lost > 0 {
		t.Fatalf("%d accepted messages lost across the control-plane restart (%d counted dropped)", lost, dropsAfter-dropsBefore)
	}
}

// waitClaimed waits until the control plane at north reports link applied and claimed.
func waitClaimed(t *testing.T, ctx context.Context, north, link string) {
	t.Helper()
	cc, err := grpc.NewClient(north, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	api := controlplanev1.NewControlPlaneServiceClient(cc)
	for {
		resp, err := api.ListLinks(ctx, &controlplanev1.ListLinksRequest{})
		if err == nil {
			for _, l := range resp.GetLinks() {
				if l.GetLinkId() == link && l.GetStatus() == "applied" && l.GetDestNodeId() != "" {
					return
				}
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("link %s never claimed: %v %v", link, resp.GetLinks(), err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}
