package controlplane

import (
	"errors"
	"testing"

	"github.com/switchboard-mesh/switchboard/controlplane/store"
)

// gatewayFixture: cloud/c1 (external), group a with gateway a/n1 (registered first, so
// it dials cloud) and siblings a/n2..a/nN, link claimed, and a/n1 announcing a name so
// it has routes over the link.
func gatewayFixture(t *testing.T, open func(testing.TB) store.Store, seed uint64, siblings int) (*harness, store.Link) {
	h := newHarness(t, open(t), starTopology, seed)
	h.register("cloud", "c1", true)
	h.register("a", "n1", false)
	for i := range siblings {
		h.register("a", "n"+string(rune('2'+i)), false)
	}
	h.claimAll()
	h.announce("cloud/c1", "org/ns/cloud")
	return h, h.linkFrom("a/n1")
}

func (h *harness) node(id string) (store.Node, error) { return h.st.GetNode(h.ctx, id) }

// TestGracefulDeregistration: outgoing links move to a sibling with their id and routes,
// and the node record is deleted.
func TestGracefulDeregistration(t *testing.T) {
	bothStores(t, func(t *testing.T, open func(testing.TB) store.Store) {
		h, l := gatewayFixture(t, open, 1, 1)
		equalStrings(t, "routes before", h.routeStrings(), []string{"a/n1->cloud org/ns/cloud @cloud/c1"})
		res, err := h.svc.NodeDeregistered(h.ctx, "a/n1", 0)
		h.must(err)
		if _, err := h.node("a/n1"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("node record after deregistration: %v", err)
		}
		got := h.link(l.ID)
		if got.SourceNodeID != "a/n2" || got.Status != store.LinkPending || got.Deleted {
			t.Fatalf("link after failover = %+v", got)
		}
		equalStrings(t, "routes after", h.routeStrings(), []string{"a/n2->cloud org/ns/cloud @cloud/c1"})
		for _, r := range h.routes(store.RouteFilter{SourceNodeID: "a/n2"}) {
			if r.Status != store.RoutePending || r.LinkID != l.ID {
				t.Fatalf("moved route = %+v", r)
			}
		}
		equalStrings(t, "link nodes", res.LinkNodes, []string{"a/n2"})
		equalStrings(t, "route nodes", res.RouteNodes, []string{"a/n2"})
		h.steady()
	})
}

// TestCrashDisconnect: the same failover, but the record stays, disconnected, and the
// node's return is a fresh session.
func TestCrashDisconnect(t *testing.T) {
	bothStores(t, func(t *testing.T, open func(testing.TB) store.Store) {
		h, l := gatewayFixture(t, open, 1, 1)
		_, err := h.svc.NodeDisconnected(h.ctx, "a/n1", 1)
		h.must(err)
		n, err := h.node("a/n1")
		h.must(err)
		if n.Connected {
			t.Fatal("crashed node still connected")
		}
		if got := h.link(l.ID); got.SourceNodeID != "a/n2" {
			t.Fatalf("link not failed over: %+v", got)
		}
		reg := h.register("a", "n1", false)
		n, err = h.node("a/n1")
		h.must(err)
		if !n.Connected || reg.Session != 2 {
			t.Fatalf("re-registered node = %+v, session %d", n, reg.Session)
		}
		// The pair is linked (through a/n2): the returning node adds no link.
		equalStrings(t, "links", h.linkStrings(), []string{"a/n2->cloud/c1"})
	})
}

// TestFailoverOutgoingRandomSibling: the new gateway is drawn from the injected source.
func TestFailoverOutgoingRandomSibling(t *testing.T) {
	bothStores(t, func(t *testing.T, open func(testing.TB) store.Store) {
		seen := map[string]bool{}
		for seed := range uint64(10) {
			pickOne := func() string {
				h, l := gatewayFixture(t, open, seed, 3)
				_, err := h.svc.NodeDisconnected(h.ctx, "a/n1", 0)
				h.must(err)
				got := h.link(l.ID)
				if got.ID != l.ID || got.SourceNodeID == "a/n1" || got.Status != store.LinkPending {
					t.Fatalf("failed-over link = %+v", got)
				}
				rs := h.routes(store.RouteFilter{LinkID: l.ID, SourceNodeID: got.SourceNodeID})
				if len(rs) != 1 {
					t.Fatalf("routes did not follow the link to %s: %+v", got.SourceNodeID, rs)
				}
				return got.SourceNodeID
			}
			first := pickOne()
			if again := pickOne(); again != first {
				t.Fatalf("seed %d picked %s then %s", seed, first, again)
			}
			seen[first] = true
		}
		if len(seen) < 2 {
			t.Fatalf("10 seeds all picked %v", seen)
		}
	})
}

// TestFailoverIncoming: when the node a link leads to departs, the link is deleted with
// the routes over it, and the source links to a random sibling; the claim brings the
// routes back over the new link.
func TestFailoverIncoming(t *testing.T) {
	bothStores(t, func(t *testing.T, open func(testing.TB) store.Store) {
		targets := map[string]bool{}
		for seed := range uint64(8) {
			h := newHarness(t, open(t), starTopology, seed)
			h.register("cloud", "c1", true)
			h.register("a", "n1", false)
			h.register("cloud", "c2", true)
			h.register("cloud", "c3", true)
			h.claimAll()
			h.announce("a/n1", "org/ns/a")
			old := h.linkFrom("a/n1")
			equalStrings(t, "routes before", h.routeStrings(), []string{"cloud/c1->a org/ns/a @a/n1"})

			res, err := h.svc.NodeDisconnected(h.ctx, "cloud/c1", 0)
			h.must(err)
			if got := h.link(old.ID); !got.Deleted {
				t.Fatalf("old link = %+v, want deleted", got)
			}
			if rs := h.routes(store.RouteFilter{LinkID: old.ID, Deleted: store.IncludeDeleted}); len(rs) != 0 {
				t.Fatalf("routes over the old link remain: %+v", rs)
			}
			fresh := h.linkFrom("a/n1")
			if fresh.ID == old.ID || fresh.TargetNodeID == "cloud/c1" || fresh.Status != store.LinkPending {
				t.Fatalf("replacement link = %+v", fresh)
			}
			targets[fresh.TargetNodeID] = true
			equalStrings(t, "link nodes", res.LinkNodes, []string{"a/n1"})

			h.claimAll()
			equalStrings(t, "routes after claim", h.routeStrings(),
				[]string{fresh.TargetNodeID + "->a org/ns/a @a/n1"})
			if rs := h.routes(store.RouteFilter{LinkID: fresh.ID}); len(rs) != 1 {
				t.Fatalf("routes over the new link: %+v", rs)
			}
			h.steady()
		}
		if len(targets) < 2 {
			t.Fatalf("8 seeds all targeted %v", targets)
		}
	})
}

// TestSingleNodeGroup: the last node of a group leaving soft-deletes the group's links
// and cleans the routes; a newcomer rebuilds them from scratch.
func TestSingleNodeGroup(t *testing.T) {
	bothStores(t, func(t *testing.T, open func(testing.TB) store.Store) {
		for _, graceful := range []bool{false, true} {
			h := newHarness(t, open(t), starTopology, 1)
			h.register("cloud", "c1", true)
			h.register("a", "n1", true)
			h.register("b", "n1", false)
			h.claimAll()
			h.announce("a/n1", "org/ns/a")
			h.announce("b/n1", "org/ns/b")
			la, lb := h.linkFrom("a/n1"), h.linkFrom("b/n1")

			var res Result
			var err error
			if graceful {
				res, err = h.svc.NodeDeregistered(h.ctx, "a/n1", 0)
			} else {
				res, err = h.svc.NodeDisconnected(h.ctx, "a/n1", 0)
			}
			h.must(err)
			got, err := h.st.GetLink(h.ctx, la.ID)
			switch {
			case graceful && !errors.Is(err, store.ErrNotFound):
				t.Fatalf("graceful: link dialled by the departed node = %+v, %v; want purged", got, err)
			case !graceful && (err != nil || !got.Deleted || got.Status != store.LinkDeleted):
				t.Fatalf("crash: link = %+v, %v; want soft-deleted", got, err)
			}
			if l := h.link(lb.ID); l.Deleted {
				t.Fatal("link of another group deleted")
			}
			// Only cloud's route for b's name is left; everything toward a is gone.
			equalStrings(t, "routes", h.routeStrings(), []string{"cloud/c1->b org/ns/b @b/n1"})
			equalStrings(t, "route nodes", res.RouteNodes, []string{"b/n1", "cloud/c1"})

			h.register("a", "n2", true)
			fresh := h.linkFrom("a/n2")
			if fresh.ID == la.ID {
				t.Fatal("newcomer reused the deleted link")
			}
			h.claimAll()
			h.announce("a/n2", "org/ns/a")
			equalStrings(t, "routes rebuilt", h.routeStrings(), []string{
				"a/n2->cloud org/ns/b @b/n1", "b/n1->cloud org/ns/a @a/n2",
				"cloud/c1->a org/ns/a @a/n2", "cloud/c1->b org/ns/b @b/n1",
			})
			h.steady()
		}
	})
}

// TestRouteCleanupOnDeparture: the departing node's own routes are hard-deleted, routes
// leading to it are marked deleted (their nodes reconcile), its templates are deleted.
func TestRouteCleanupOnDeparture(t *testing.T) {
	bothStores(t, func(t *testing.T, open func(testing.TB) store.Store) {
		h := newHarness(t, open(t), starTopology, 1)
		h.register("cloud", "c1", true)
		h.register("a", "n1", true)
		h.register("b", "n1", true)
		h.claimAll()
		h.announce("a/n1", "org/ns/a")
		h.announce("b/n1", "org/ns/b")
		own := h.routes(store.RouteFilter{SourceNodeID: "a/n1"})
		toward := h.routes(store.RouteFilter{DestNodeID: "a/n1"})
		if len(own) == 0 || len(toward) < 3 {
			t.Fatalf("fixture: own %d, toward %d", len(own), len(toward))
		}
		res, err := h.svc.NodeDisconnected(h.ctx, "a/n1", 0)
		h.must(err)
		if rs := h.routes(store.RouteFilter{SourceNodeID: "a/n1", Deleted: store.IncludeDeleted}); len(rs) != 0 {
			t.Fatalf("own routes left: %+v", rs)
		}
		for _, r := range toward {
			got, err := h.st.GetRoute(h.ctx, r.ID)
			if r.IsTemplate() {
				if !errors.Is(err, store.ErrNotFound) {
					t.Errorf("template %+v not deleted", got)
				}
				continue
			}
			if err != nil || !got.Deleted {
				t.Errorf("route %+v toward a/n1: %v, want marked deleted", got, err)
			}
		}
		equalStrings(t, "route nodes", res.RouteNodes, []string{"b/n1", "cloud/c1"})
	})
}

// TestFirstAnnouncerLeaves: the tree re-roots at the next announcer.
func TestFirstAnnouncerLeaves(t *testing.T) {
	bothStores(t, func(t *testing.T, open func(testing.TB) store.Store) {
		h := newHarness(t, open(t), starTopology, 1)
		h.register("cloud", "c1", true)
		h.register("a", "n1", false)
		h.register("a", "n2", false)
		h.register("b", "n1", false)
		h.claimAll()
		h.announce("a/n1", "org/ns/svc")
		h.announce("b/n1", "org/ns/svc")
		_, err := h.svc.NodeDeregistered(h.ctx, "a/n1", 0)
		h.must(err)
		h.announce("a/n2", "org/ns/svc")
		equalStrings(t, "routes", h.routeStrings(), []string{
			"a/n2->cloud org/ns/svc @b/n1",
			"b/n1->cloud org/ns/svc @a/n2",
			"cloud/c1->a org/ns/svc @a/n2",
			"cloud/c1->b org/ns/svc @b/n1",
		})
		h.steady()
	})
}
