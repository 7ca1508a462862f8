package main

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/switchboard-mesh/switchboard/internal/embednats"
)

// gatewayFailoverBound is how long delivery may stay interrupted after the gateway is
// cut off, as after a crash (TestGatewayProcessKilled in dataplane/node: the control
// plane sees the gateway's stream end and moves the link to its sibling at once).
const gatewayFailoverBound = 10 * time.Second

// TestDataplanePartitionGatewayFailover is TestGatewayProcessKilled (dataplane/node)
// with the gateway cut off instead of killed: a/n1 publishes a steady stream to a
// subscriber on b/n2; the link from a lands on b/n1, b's gateway, which reaches a/n1's
// link and the control plane through proxies. Both of b/n1's paths are partitioned —
// the process lives on. Delivery resumes over a link to b/n2 within
// gatewayFailoverBound, and every message accepted is delivered or counted dropped by
// a node (a lost message the nodes did not count fails the test), none twice.
//
// Cut, the gateway's connections close at once. Black-holed, they stay open and
// silent: the control plane's keepalive ends the gateway's control stream (within
// southbound.KeepaliveTime + KeepaliveTimeout, 6 s) and the link moves as after a
// cut; a/n1's keepalive on the old link (10 s + 5 s) would break it too.
func TestDataplanePartitionGatewayFailover(t *testing.T) {
	cases := []struct {
		name      string
		partition func(*pathProxy)
	}{{"cut", (*pathProxy).Cut}, {"black_hole", (*pathProxy).BlackHole}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			start := time.Now()
			ns, err := embednats.Start(ctx, embednats.Options{StoreDir: t.TempDir()})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(ns.Shutdown)
			reg := fmt.Sprintf("registry: {backend: jetstream, params: {nats-url: %q}}\n", ns.ClientURL())
			cp := startDPControlPlane(t, dpPairAB)

			a := startDPNode(t, "a", "n1", freeLoopback(t), "", cp.south, "")
			// b/n1 comes first, alone in its group, so the link from a lands on it; a
			// reaches it (and it reaches the control plane) through proxies.
			gwListen := freeLoopback(t)
			linkPath := startPathProxy(t, gwListen)
			cpPath := startPathProxy(t, cp.south)
			gw := startDPNode(t, "b", "n1", gwListen, linkPath.Addr(), cpPath.Addr(), reg)
			if l := oneAppliedLink(t, cp.north); l.GetDestNodeId() != "b/n1" {
				t.Fatalf("the link from a is held by %s, want b/n1", l.GetDestNodeId())
			}
			n2Listen := freeLoopback(t)
			n2 := startDPNode(t, "b", "n2", n2Listen, n2Listen, cp.south, reg)
			const name = "org/ns/steady"
			sub := dialNode(t, n2.listen).subscribe(t, name)
			pub := dialNode(t, a.listen)
			waitReaching(t, ctx, pub, sub, name)
			dropsBefore := dropped(t, a, n2)

			st := startStream(ctx, pub, sub, name, 2*time.Millisecond)
			st.waitDelivered(t, ctx, time.Time{}, 50, "before the partition")
			partitioned := time.Now()
			tc.partition(linkPath)
			tc.partition(cpPath)
			bound, bcancel := context.WithTimeout(ctx, gatewayFailoverBound)
			st.waitDelivered(t, bound, partitioned, 50, "delivery after the gateway was cut off")
			bcancel()
			resumed := time.Now()
			st.waitDelivered(t, ctx, resumed, 200, "delivery over the new link")
			st.finish(ctx, 2*time.Second)

			counted := dropped(t, a, n2) - dropsBefore
			acc, del, lost, _ := st.report(partitioned.Add(-time.Second), time.Time{})
			_, _, _, gap := st.report(partitioned, time.Time{}) // the first silence is the failover
			t.Logf("gateway b/n1 %s off: 50 messages delivered again %s after the partition; from 1 s before it: %d accepted, %d delivered, %d lost, %d counted dropped by a/n1 and b/n2, %d duplicated, %d refused (nobody reachable), longest silence after the partition %s; gateway still running: %v; subtest %s",
				tc.name, resumed.Sub(partitioned).Round(time.Millisecond), acc, del, lost, counted, st.dups, st.refused,
				gap.Round(time.Millisecond), !gw.exited(), time.Since(start).Round(time.Millisecond))
			if st.dups > 0 {
				t.Errorf("%d messages delivered twice", st.dups)
			}
			if lost > counted {
				t.Errorf("%d accepted messages lost but only %d counted as dropped: %d lost silently", lost, counted, lost-counted)
			}
		})
	}
}

// dropped sums the nodes' dropped-message counters.
func dropped(t *testing.T, nodes ...*dpNode) int {
	t.Helper()
	total := 0.0
	for _, n := range nodes {
		v, _ := n.metric(t, "switchboard_node_messages_dropped_total")
		total += v
	}
	return int(total)
}

// exited reports whether the node's process has ended.
func (n *dpNode) exited() bool {
	select {
	case <-n.p.done:
		return true
	default:
		return false
	}
}
