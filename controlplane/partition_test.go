package controlplane

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/switchboard-mesh/switchboard/controlplane/store"
	"github.com/switchboard-mesh/switchboard/controlplane/store/sqlite"
)

const pairTopology = "topology:\n  links: [{group: a, neighbors: [b]}]\n"

// partitioned builds a -> b (a dials, b claims, b announces org/ns/svc), then has both
// streams end without deregistration, b's first: the link is soft-deleted.
func partitioned(t *testing.T, open func(testing.TB) store.Store) (*harness, store.Link) {
	t.Helper()
	h := newHarness(t, open(t), pairTopology, 1)
	h.register("a", "n1", false)
	h.register("b", "n1", true)
	h.claimAll()
	h.announce("b/n1", "org/ns/svc")
	l := h.linkFrom("a/n1")
	if l.DestNodeID != "b/n1" || l.Status != store.LinkApplied {
		t.Fatalf("link before the partition: %+v", l)
	}
	for _, id := range []string{"b/n1", "a/n1"} {
		_, err := h.svc.NodeDisconnected(h.ctx, id, 0)
		h.must(err)
	}
	if got := h.link(l.ID); !got.Deleted {
		t.Fatalf("link after both ends left: %+v, want soft-deleted", got)
	}
	return h, l
}

// TestPartitionHealAdoptsLink: both ends of a link lose the control plane (their
// streams end, the link is soft-deleted) but keep the connection; whichever comes back
// first naming the link gets it back under its id, Applied, and no second link is
// made; the other end then confirms it, and the routes over it are planned again.
func TestPartitionHealAdoptsLink(t *testing.T) {
	bothStores(t, func(t *testing.T, open func(testing.TB) store.Store) {
		for _, first := range []string{"a", "b"} {
			h, l := partitioned(t, open)
			alive := ConnectionReport{LinkID: l.ID, Alive: true}
			second := map[string]string{"a": "b", "b": "a"}[first]
			reg := h.register(first, "n1", first == "b", alive)
			got := h.link(l.ID)
			if got.Deleted || got.Status != store.LinkApplied || got.SourceNodeID != "a/n1" || got.DestNodeID != "b/n1" ||
				got.StatusMessage != store.LinkAdopted {
				t.Fatalf("%s back first: link %+v, want it adopted", first, got)
			}
			equalStrings(t, first+" back first: links", h.linkStrings(), []string{"a/n1->b/n1"})
			// The link's source reconciles it (and b itself, as every registering node).
			wantLinkNodes := []string{"a/n1"}
			if first == "b" {
				wantLinkNodes = append(wantLinkNodes, "b/n1")
			}
			equalStrings(t, first+" back first: link nodes", reg.LinkNodes, wantLinkNodes)

			h.register(second, "n1", second == "b", alive)
			h.announce("b/n1", "org/ns/svc")
			if ls := h.links(store.LinkFilter{}); len(ls) != 1 || ls[0].ID != l.ID || ls[0].Status != store.LinkApplied || ls[0].DestNodeID != "b/n1" {
				t.Fatalf("%s back first, then %s: links %+v, want %s alone", first, second, ls, l.ID)
			}
			equalStrings(t, first+" back first: routes", h.routeStrings(), []string{"a/n1->b org/ns/svc @b/n1"})
			h.steady()
		}
	})
}

// TestPartitionHealLinkNotAdopted: a deleted link is taken back only when its other end
// is still away, it was claimed, and the topology and endpoint are as they were;
// otherwise the groups are linked anew, as before.
func TestPartitionHealLinkNotAdopted(t *testing.T) {
	bothStores(t, func(t *testing.T, open func(testing.TB) store.Store) {
		t.Run("other end connected", func(t *testing.T) {
			// Only b lost the control plane: a stays connected and its reconciler deletes
			// the connection; b naming it must not bring it back meanwhile.
			h := newHarness(t, open(t), pairTopology, 1)
			h.register("a", "n1", false)
			h.register("b", "n1", true)
			h.claimAll()
			l := h.linkFrom("a/n1")
			_, err := h.svc.NodeDisconnected(h.ctx, "b/n1", 0)
			h.must(err)
			h.register("b", "n1", true, ConnectionReport{LinkID: l.ID, Alive: true})
			if got := h.link(l.ID); !got.Deleted {
				t.Fatalf("link %+v adopted while its source is connected", got)
			}
			if fresh := h.linkFrom("a/n1"); fresh.ID == l.ID || fresh.Status != store.LinkPending {
				t.Fatalf("new link %+v", fresh)
			}
		})
		t.Run("endpoint changed", func(t *testing.T) {
			h, l := partitioned(t, open)
			h.must2(h.svc.NodeRegistered(h.ctx, Registration{NodeID: "n1", Group: "b",
				ConnDetails: []store.ConnectionDetails{{Endpoint: "x:1", ExternalEndpoint: "elsewhere.example:443"}},
				Connections: []ConnectionReport{{LinkID: l.ID, Alive: true}}}))
			if got := h.link(l.ID); !got.Deleted {
				t.Fatalf("link %+v adopted although its target moved", got)
			}
		})
		t.Run("reported dead", func(t *testing.T) {
			h, l := partitioned(t, open)
			h.register("b", "n1", true, ConnectionReport{LinkID: l.ID, Alive: false})
			if got := h.link(l.ID); !got.Deleted {
				t.Fatalf("link %+v adopted although reported dead", got)
			}
		})
	})
}

func (h *harness) must2(_ Registered, err error) { h.t.Helper(); h.must(err) }

// TestRestartDoesNotAdopt: a restarted control plane has no record of the ids it
// issued before, so a node naming one gets a new link, made Pending, not adopted.
func TestRestartDoesNotAdopt(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	path := filepath.Join(t.TempDir(), "cp.db")
	open := func(testing.TB) store.Store {
		s, err := sqlite.Open(ctx, path)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	first, l := partitioned(t, open)
	must(t, first.st.Close())
	second := newHarness(t, open(t), pairTopology, 7)
	second.svc.newID = func() string { return "link-second" }
	alive := ConnectionReport{LinkID: l.ID, Alive: true}
	second.register("b", "n1", true, alive)
	second.register("a", "n1", false, alive)
	if _, err := second.st.GetLink(ctx, l.ID); err == nil {
		t.Fatalf("restarted control plane has link %s of its previous incarnation", l.ID)
	}
	if got := second.linkFrom("a/n1"); got.ID != "link-second" || got.Status != store.LinkPending {
		t.Fatalf("link after the restart: %+v", got)
	}
}

// TestSiblingTakesOverAdoptedLink: a link adopted from b while a/n1 is still away has a
// disconnected end; a sibling of a/n1 registering takes it over, as a/n1's departure
// would have had the sibling been there.
func TestSiblingTakesOverAdoptedLink(t *testing.T) {
	bothStores(t, func(t *testing.T, open func(testing.TB) store.Store) {
		h, l := partitioned(t, open)
		h.register("b", "n1", true, ConnectionReport{LinkID: l.ID, Alive: true})
		if got := h.link(l.ID); got.Deleted || got.SourceNodeID != "a/n1" {
			t.Fatalf("link %+v, want adopted from a/n1", got)
		}
		h.register("a", "n2", false)
		got := h.link(l.ID)
		if got.Deleted || got.SourceNodeID != "a/n2" || got.Status != store.LinkPending {
			t.Fatalf("link %+v, want moved to a/n2, pending", got)
		}
		equalStrings(t, "links", h.linkStrings(), []string{"a/n2->b/n1"})
	})
}
