package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	controlplanev1 "github.com/switchboard-mesh/switchboard/gen/switchboard/controlplane/v1"
)

const dpPairAB = "  links:\n    - group: a\n      neighbors: [b]"

// TestDataplanePartitionControlPlane: nodes a/n1 (publisher) and b/n1 (subscriber),
// linked directly, reach the control plane each through a proxy of its own. Both
// paths are partitioned — black-holed (connections open, nothing delivered) or cut
// (closed and refused) — for 3 s while a steady stream flows a -> b: every message the
// publisher's node accepted arrives, once, during the partition and after it, and none
// is refused during it or after it. Healed, the control plane reconverges: both nodes
// connected, one applied link between the groups — the same link, under the same id,
// as before the partition — no duplicate route, one link connection on each node.
func TestDataplanePartitionControlPlane(t *testing.T) {
	for _, tc := range []struct {
		name      string
		partition func(*pathProxy)
	}{
		{"black_hole", (*pathProxy).BlackHole},
		{"cut", (*pathProxy).Cut},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			start := time.Now()
			cp := startDPControlPlane(t, dpPairAB)
			pa, pb := startPathProxy(t, cp.south), startPathProxy(t, cp.south)
			bListen := freeLoopback(t)
			// a only dials: the link is a -> b in every life of the control plane.
			a := startDPNode(t, "a", "n1", freeLoopback(t), "", pa.Addr(), "")
			b := startDPNode(t, "b", "n1", bListen, bListen, pb.Addr(), "")
			const name = "org/ns/svc"
			sub := dialNode(t, b.listen).subscribe(t, name)
			pub := dialNode(t, a.listen)
			waitReaching(t, ctx, pub, sub, name)
			link := oneAppliedLink(t, cp.north)
			linkUp := time.Now()

			st := startStream(ctx, pub, sub, name, 2*time.Millisecond)
			st.waitDelivered(t, ctx, time.Time{}, 50, "before the partition")
			partitioned := time.Now()
			tc.partition(pa)
			tc.partition(pb)
			if tc.name == "cut" {
				// The nodes know: their control streams ended, they are not ready.
				dpWait(t, 10*time.Second, "nodes notice the cut", func() error {
					if a.ready() || b.ready() {
						return fmt.Errorf("a ready %v, b ready %v", a.ready(), b.ready())
					}
					return nil
				})
			}
			time.Sleep(time.Until(partitioned.Add(3 * time.Second)))
			healed := time.Now()
			during := st.deliveredSince(partitioned)
			if during < 100 {
				t.Fatalf("only %d messages delivered in the 3 s the control plane was partitioned", during)
			}
			pa.Heal()
			pb.Heal()

			dpWait(t, 15*time.Second, "reconverged after the partition", func() error {
				return reconverged(t, cp.north, a, b)
			})
			reconvergedAt := time.Now()
			st.waitDelivered(t, ctx, reconvergedAt, 50, "after reconvergence")
			st.finish(ctx, 2*time.Second)
			if err := reconverged(t, cp.north, a, b); err != nil {
				t.Fatalf("after the stream: %v", err)
			}
			after := oneAppliedLink(t, cp.north)

			acc, del, lost, gap := st.report(linkUp, time.Time{})
			pacc, pdel, plost, _ := st.report(partitioned, healed)
			dropA, _ := a.metric(t, "switchboard_node_messages_dropped_total")
			dropB, _ := b.metric(t, "switchboard_node_messages_dropped_total")
			t.Logf("control-plane paths %s for %s: %d accepted during the partition, %d delivered, %d lost; whole stream %d accepted, %d delivered, %d lost, %d duplicated, %d refused, longest gap %s, dropped counted a=%v b=%v; link %s before, %s after; reconverged %s after the heal; subtest %s",
				tc.name, healed.Sub(partitioned).Round(time.Millisecond), pacc, pdel, plost, acc, del, lost, st.dups, st.refused,
				gap.Round(time.Millisecond), dropA, dropB, link.GetLinkId(), after.GetLinkId(),
				reconvergedAt.Sub(healed).Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
			if plost > 0 {
				t.Errorf("%d of %d messages accepted during the partition never arrived", plost, pacc)
			}
			if lost > 0 {
				t.Errorf("%d of %d messages accepted after the link was up never arrived", lost, acc)
			}
			if st.dups > 0 {
				t.Errorf("%d messages delivered twice", st.dups)
			}
			// During the partition the node must go on routing. After the heal the
			// control plane adopts the link both ends still hold (same id, no
			// teardown), so the routes over it stay and no publish is refused then
			// either (refused: NOT_FOUND, no route).
			if r := st.refusedIn(partitioned, healed); r > 0 {
				t.Errorf("%d publishes refused (no route) during the partition", r)
			}
			if r := st.refusedIn(healed, time.Now()); r > 0 {
				t.Errorf("%d publishes refused (no route) after the heal", r)
			}
			if link.GetLinkId() != after.GetLinkId() {
				t.Errorf("link %s before the partition, %s after: the link was rebuilt, not kept", link.GetLinkId(), after.GetLinkId())
			}
		})
	}
}

// oneAppliedLink waits up to 10 s for exactly one live link between a and b, applied
// and claimed, and returns it.
func oneAppliedLink(t *testing.T, north string) *controlplanev1.Link {
	t.Helper()
	var out *controlplanev1.Link
	dpWait(t, 10*time.Second, "one applied link a-b", func() error {
		links, err := dpLinks(t, north)
		if err != nil {
			return err
		}
		var live []*controlplanev1.Link
		for _, l := range links {
			if !l.GetDeleted() {
				live = append(live, l)
			}
		}
		if len(live) != 1 || live[0].GetStatus() != "applied" || live[0].GetDestNodeId() == "" {
			return fmt.Errorf("live links %v", live)
		}
		out = live[0]
		return nil
	})
	return out
}

// reconverged checks the control plane's view and the nodes': both nodes connected,
// one applied and claimed link between them and no other live link, no two live routes
// alike, each node ready with one link connection, up.
func reconverged(t *testing.T, north string, nodes ...*dpNode) error {
	t.Helper()
	ns, err := dpNodes(t, north)
	if err != nil {
		return err
	}
	connected := map[string]bool{}
	for _, n := range ns {
		connected[n.GetId()] = n.GetConnected()
	}
	for _, n := range nodes {
		if !connected[n.id] || !n.ready() {
			return fmt.Errorf("%s: connected %v, ready %v", n.id, connected[n.id], n.ready())
		}
	}
	links, err := dpLinks(t, north)
	if err != nil {
		return err
	}
	var live []string
	for _, l := range links {
		if l.GetDeleted() {
			continue
		}
		live = append(live, l.GetLinkId())
		if l.GetStatus() != "applied" || l.GetDestNodeId() == "" {
			return fmt.Errorf("link %s %s (dest %q)", l.GetLinkId(), l.GetStatus(), l.GetDestNodeId())
		}
	}
	if len(live) != 1 {
		return fmt.Errorf("live links %v, want one", live)
	}
	routes, err := dpRoutes(t, north)
	if err != nil {
		return err
	}
	seen := map[string]int64{}
	for _, r := range routes {
		if r.GetDeleted() {
			continue
		}
		key := strings.Join([]string{r.GetSourceNodeId(), r.GetDestNodeId(), r.GetName(), fmt.Sprint(r.ComponentId), r.GetLinkId()}, "|")
		if prev, dup := seen[key]; dup {
			return fmt.Errorf("routes %d and %d are alike: %s", prev, r.GetId(), key)
		}
		seen[key] = r.GetId()
		if r.GetStatus() != "applied" {
			return fmt.Errorf("route %d %s %s: %s %s", r.GetId(), key, r.GetStatus(), r.GetStatusMessage(), "")
		}
	}
	for _, n := range nodes {
		up, series := n.metric(t, "switchboard_node_link_up", `link="`+live[0]+`"`)
		all, _ := n.metric(t, "switchboard_node_link_up")
		if series != 1 || up != 1 || all != 1 {
			return fmt.Errorf("%s: link_up for %s: %v over %d series; %v up in all", n.id, live[0], up, series, all)
		}
	}
	return nil
}
