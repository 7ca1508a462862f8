package controlplane

import (
	"context"
	"errors"
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

// TestPartitionHealNotAdoptedTowardAwayEndWithConnectedSibling: the source, last of its
// group, loses the control plane; then the destination crashes for good while a
// sibling of it stays connected. The source's dialer keeps the link and redials, and
// reports it alive on its return: the link must not be adopted toward the dead end —
// the groups would stay cut off — but made anew to the connected sibling.
func TestPartitionHealNotAdoptedTowardAwayEndWithConnectedSibling(t *testing.T) {
	bothStores(t, func(t *testing.T, open func(testing.TB) store.Store) {
		h := newHarness(t, open(t), pairTopology, 1)
		h.register("b", "n1", true)
		h.register("b", "n2", true)
		h.register("a", "n1", false)
		h.claimAll()
		l := h.linkFrom("a/n1")
		dead := l.DestNodeID
		for _, id := range []string{"a/n1", dead} {
			_, err := h.svc.NodeDisconnected(h.ctx, id, 0)
			h.must(err)
		}
		h.register("a", "n1", false, ConnectionReport{LinkID: l.ID, Alive: true})
		if got := h.link(l.ID); !got.Deleted {
			t.Fatalf("link %+v adopted toward %s, which is away, while its sibling is connected", got, dead)
		}
		if fresh := h.linkFrom("a/n1"); fresh.ID == l.ID || fresh.TargetNodeID == dead {
			t.Fatalf("new link %+v, want one to the connected sibling of %s", fresh, dead)
		}
	})
}

// TestPartitionHealNotAdoptedAfterSiblingRegistered: a sibling of the away source
// registers before the destination comes back naming the link: the link is not
// adopted with its away source (the sibling's group is connected again).
func TestPartitionHealNotAdoptedAfterSiblingRegistered(t *testing.T) {
	bothStores(t, func(t *testing.T, open func(testing.TB) store.Store) {
		h := newHarness(t, open(t), pairTopology, 1)
		h.register("a", "n1", false)
		h.register("b", "n1", true)
		h.claimAll()
		h.register("a", "n2", false)
		l := h.linkFrom("a/n1")
		for _, id := range []string{"a/n2", "a/n1", "b/n1"} {
			_, err := h.svc.NodeDisconnected(h.ctx, id, 0)
			h.must(err)
		}
		h.register("a", "n2", false)
		h.register("b", "n1", true, ConnectionReport{LinkID: l.ID, Alive: true})
		if got := h.link(l.ID); !got.Deleted {
			t.Fatalf("link %+v adopted with away source a/n1 while a/n2 is connected", got)
		}
		equalStrings(t, "links", h.linkStrings(), []string{"a/n2->b/n1"})
	})
}

// TestPartitionHealNotAdoptedFromEndThatNeverHeldIt: a failover moved the link to a
// sibling (Pending: it never dialled it), which then left as the last of its group;
// the destination naming the link must not get it back as Applied from that sibling.
func TestPartitionHealNotAdoptedFromEndThatNeverHeldIt(t *testing.T) {
	bothStores(t, func(t *testing.T, open func(testing.TB) store.Store) {
		h := newHarness(t, open(t), pairTopology, 1)
		h.register("a", "n1", false)
		h.register("b", "n1", true)
		h.claimAll()
		h.register("a", "n2", false)
		l := h.linkFrom("a/n1")
		_, err := h.svc.NodeDisconnected(h.ctx, "a/n1", 0)
		h.must(err)
		if got := h.link(l.ID); got.SourceNodeID != "a/n2" || got.Status != store.LinkPending {
			t.Fatalf("link %+v, want moved to a/n2, pending", got)
		}
		for _, id := range []string{"a/n2", "b/n1"} {
			_, err := h.svc.NodeDisconnected(h.ctx, id, 0)
			h.must(err)
		}
		h.register("b", "n1", true, ConnectionReport{LinkID: l.ID, Alive: true})
		if got := h.link(l.ID); !got.Deleted {
			t.Fatalf("link %+v adopted from a/n2, which never held its connection", got)
		}
	})
}

// TestPartitionHealNotAdoptedOverOpenStream: only b lost the control plane, and the
// link was soft-deleted with it; a registering again over a new stream while the
// control plane still thought its old one open was never cut off, and its reconciler
// may be deleting the link: no adoption.
func TestPartitionHealNotAdoptedOverOpenStream(t *testing.T) {
	bothStores(t, func(t *testing.T, open func(testing.TB) store.Store) {
		h := newHarness(t, open(t), pairTopology, 1)
		h.register("a", "n1", false)
		h.register("b", "n1", true)
		h.claimAll()
		l := h.linkFrom("a/n1")
		_, err := h.svc.NodeDisconnected(h.ctx, "b/n1", 0)
		h.must(err)
		h.register("a", "n1", false, ConnectionReport{LinkID: l.ID, Alive: true})
		if got := h.link(l.ID); !got.Deleted {
			t.Fatalf("link %+v adopted by a/n1, which was connected all along", got)
		}
	})
}

// TestAdoptedLinkVersionPassesDeleted: the adopted link is a new record under the
// deleted one's id; its version exceeds the deleted one's, so a reconciler pass still
// holding the deleted record cannot hard-delete it (DeleteLinkIf), then or later.
func TestAdoptedLinkVersionPassesDeleted(t *testing.T) {
	bothStores(t, func(t *testing.T, open func(testing.TB) store.Store) {
		h, l := partitioned(t, open)
		deleted := h.link(l.ID)
		alive := ConnectionReport{LinkID: l.ID, Alive: true}
		h.register("b", "n1", true, alive)
		if got := h.link(l.ID); got.Deleted || got.Version <= deleted.Version {
			t.Fatalf("adopted link %+v, want live at a version above the deleted one's %d", got, deleted.Version)
		}
		h.register("a", "n1", false, alive)
		if err := h.st.DeleteLinkIf(h.ctx, l.ID, deleted.Version); !errors.Is(err, store.ErrConflict) {
			t.Fatalf("DeleteLinkIf at the deleted record's version %d: %v, want a conflict", deleted.Version, err)
		}
	})
}

// TestAdoptedMarkerClearsWhenFarEndReturns: the adopted marker (which keeps untracked
// subscriptions over the link) lasts only while the far end is away: once it has
// registered again, the link is an ordinary Applied link.
func TestAdoptedMarkerClearsWhenFarEndReturns(t *testing.T) {
	bothStores(t, func(t *testing.T, open func(testing.TB) store.Store) {
		for _, first := range []string{"a", "b"} {
			h, l := partitioned(t, open)
			alive := ConnectionReport{LinkID: l.ID, Alive: true}
			second := map[string]string{"a": "b", "b": "a"}[first]
			h.register(first, "n1", first == "b", alive)
			if got := h.link(l.ID); got.StatusMessage != store.LinkAdopted {
				t.Fatalf("%s back first: link %+v, want it adopted", first, got)
			}
			h.register(second, "n1", second == "b", alive)
			if got := h.link(l.ID); got.Deleted || got.Status != store.LinkApplied || got.StatusMessage == store.LinkAdopted {
				t.Fatalf("%s back first, then %s: link %+v, want Applied and no longer marked adopted", first, second, got)
			}
		}
	})
}

// countingStore counts the listings of a whole group's nodes.
type countingStore struct {
	store.Store
	groupLists int
}

func (c *countingStore) ListNodes(ctx context.Context, f store.NodeFilter) ([]store.Node, error) {
	if f.Group != "" && !f.ConnectedOnly {
		c.groupLists++
	}
	return c.Store.ListNodes(ctx, f)
}

// TestRegistrationDoesNotListGroup: with no adopted link waiting for its far end, a
// registration does not list the nodes of its group (a disconnected sibling there
// has no link to hand over): it costs no more in a group of 1,000 nodes.
func TestRegistrationDoesNotListGroup(t *testing.T) {
	bothStores(t, func(t *testing.T, open func(testing.TB) store.Store) {
		st := &countingStore{Store: open(t)}
		h := newHarness(t, st, pairTopology, 1)
		h.register("a", "n1", false)
		h.register("b", "n1", true)
		h.register("b", "n2", true)
		h.claimAll()
		_, err := h.svc.NodeDisconnected(h.ctx, "b/n2", 0)
		h.must(err)
		st.groupLists = 0
		h.register("b", "n3", true)
		if st.groupLists != 0 {
			t.Fatalf("registration listed the nodes of its group %d times", st.groupLists)
		}
	})
}

// TestDeregisteredNodeLeavesNothingToAdopt: the last node of a group that deregisters
// (it is not coming back) leaves no record of its links for adoption, whichever end
// it was: nothing of it is kept in memory.
func TestDeregisteredNodeLeavesNothingToAdopt(t *testing.T) {
	bothStores(t, func(t *testing.T, open func(testing.TB) store.Store) {
		for _, leaving := range []string{"a/n1", "b/n1"} {
			h := newHarness(t, open(t), pairTopology, 1)
			h.register("a", "n1", false)
			h.register("b", "n1", true)
			h.claimAll()
			_, err := h.svc.NodeDeregistered(h.ctx, leaving, 0)
			h.must(err)
			h.svc.mu.Lock()
			left := len(h.svc.dropped)
			h.svc.mu.Unlock()
			if left != 0 {
				t.Fatalf("%s deregistered: %d links still remembered for adoption", leaving, left)
			}
		}
	})
}
