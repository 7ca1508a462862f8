package node_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/switchboard-mesh/switchboard/controlplane/store"
	"github.com/switchboard-mesh/switchboard/internal/fabric"
)

// gatewayOf returns the node of group g that holds the live link between g and other.
func gatewayOf(t *testing.T, f *fabric.Fabric, g, other string) string {
	t.Helper()
	links, err := f.ControlPlane().Store().ListLinks(context.Background(), store.LinkFilter{})
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range links {
		switch {
		case l.SourceGroup == g && l.DestGroup == other:
			return l.SourceNodeID
		case l.DestGroup == g && l.SourceGroup == other && l.DestNodeID != "":
			return l.DestNodeID
		}
	}
	t.Fatalf("no link between %s and %s", g, other)
	return ""
}

// TestGatewayCrashRestoresDelivery: the gateway of the subscriber's group crashes; the
// control plane moves its link to the sibling, and delivery comes back. The gap and the
// messages lost in it are logged; every message published after the gap arrives.
func TestGatewayCrashRestoresDelivery(t *testing.T) {
	f := startFabric(t, "links:\n  - group: a\n    neighbors: [b]\n", 2, "a", "b")
	ctx := deadline(t, 60*time.Second)
	gw := gatewayOf(t, f, "b", "a")
	survivor := "b/n1"
	if gw == survivor {
		survivor = "b/n2"
	}
	s := clientOf(t, f, survivor).subscribe("org/ns/svc")
	pub := clientOf(t, f, "a/n1")
	waitReached(t, ctx, pub, s, "org/ns/svc")

	if err := f.StopNode(gw, true); err != nil {
		t.Fatal(err)
	}
	crashed := time.Now()
	// Publish every 10 ms until messages flow again; count what was accepted and lost.
	accepted, refused := 0, 0
	var restored time.Time
	got := map[string]bool{}
	for i := 0; restored.IsZero(); i++ {
		payload := fmt.Sprint("m", i)
		if _, err := pub.publish(ctx, "org/ns/svc", payload, false); err == nil {
			accepted++
		} else {
			refused++
		}
		for {
			m := s.quiet(10 * time.Millisecond)
			if m == nil {
				break
			}
			got[string(m.GetPayload())] = true
			if strings.HasPrefix(string(m.GetPayload()), "m") && restored.IsZero() {
				restored = time.Now()
			}
		}
		if ctx.Err() != nil {
			t.Fatalf("delivery not restored %s after the gateway crashed", time.Since(crashed))
		}
	}
	t.Logf("gateway %s crashed: delivery restored after %s; %d publishes accepted meanwhile (%d delivered), %d refused as unroutable",
		gw, restored.Sub(crashed).Round(time.Millisecond), accepted, len(got), refused)
	// After the gap, nothing is lost.
	for i := range 50 {
		if _, err := pub.publish(ctx, "org/ns/svc", fmt.Sprint("after", i), false); err != nil {
			t.Fatalf("publish after restoration: %v", err)
		}
	}
	for i := range 50 {
		m, err := s.next(ctx)
		for err == nil && !strings.HasPrefix(string(m.GetPayload()), "after") {
			m, err = s.next(ctx)
		}
		if err != nil {
			t.Fatalf("message after%d: %v", i, err)
		}
		if string(m.GetPayload()) != fmt.Sprint("after", i) {
			t.Fatalf("got %q, want after%d (in order)", m.GetPayload(), i)
		}
	}
}

// TestNodeRestart: a crashed node comes back under the same id with its client's
// subscription, and messages reach it again.
func TestNodeRestart(t *testing.T) {
	f := startFabric(t, "links:\n  - group: a\n    neighbors: [b]\n", 1, "a", "b")
	ctx := deadline(t, 60*time.Second)
	pub := clientOf(t, f, "a/n1")
	s := clientOf(t, f, "b/n1").subscribe("org/ns/svc")
	waitReached(t, ctx, pub, s, "org/ns/svc")
	if err := f.StopNode("b/n1", true); err != nil {
		t.Fatal(err)
	}
	if _, err := f.StartNode(ctx, "b", "n1"); err != nil {
		t.Fatal(err)
	}
	s2 := clientOf(t, f, "b/n1").subscribe("org/ns/svc")
	waitReached(t, ctx, pub, s2, "org/ns/svc")
}

// TestControlPlaneDownKeepsDelivery: with the control plane stopped, messages keep
// flowing over the links that exist.
func TestControlPlaneDownKeepsDelivery(t *testing.T) {
	f := startFabric(t, "links:\n  - group: a\n    neighbors: [b]\n", 1, "a", "b")
	ctx := deadline(t, 60*time.Second)
	pub := clientOf(t, f, "a/n1")
	s := clientOf(t, f, "b/n1").subscribe("org/ns/svc")
	waitReached(t, ctx, pub, s, "org/ns/svc")
	f.StopControlPlane()
	for i := range 20 {
		if _, err := pub.publish(ctx, "org/ns/svc", fmt.Sprint("down", i), false); err != nil {
			t.Fatalf("publish %d with the control plane down: %v", i, err)
		}
		m, err := s.next(ctx)
		if err != nil || string(m.GetPayload()) != fmt.Sprint("down", i) {
			t.Fatalf("message %d with the control plane down: %v %v", i, m, err)
		}
	}
}
