package controlplane

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/switchboard-mesh/switchboard/controlplane/store"
)

const starTopology = "topology:\n  links: [{group: cloud, neighbors: [\"*\"]}]\n"

// linkFrom returns the live link whose source is src.
func (h *harness) linkFrom(src string) store.Link {
	h.t.Helper()
	ls := h.links(store.LinkFilter{SourceNodeID: src})
	if len(ls) != 1 {
		h.t.Fatalf("%d live links from %s, want 1", len(ls), src)
	}
	return ls[0]
}

func (h *harness) setLink(id string, steps ...store.LinkStatus) {
	h.t.Helper()
	for _, st := range steps {
		_, err := store.SetLinkStatus(h.ctx, h.st, id, st, "")
		h.must(err)
	}
}

// TestRegisterLinkSync re-registers a hub with links in every state and checks the three
// link-sync cases of node_registered.
func TestRegisterLinkSync(t *testing.T) {
	bothStores(t, func(t *testing.T, open func(testing.TB) store.Store) {
		h := newHarness(t, open(t), starTopology, 1)
		h.register("cloud", "n1", true)
		for _, g := range []string{"a", "b", "c", "d"} {
			h.register(g, "n1", false)
		}
		la, lb, lc, ld := h.linkFrom("a/n1"), h.linkFrom("b/n1"), h.linkFrom("c/n1"), h.linkFrom("d/n1")
		h.setLink(la.ID, store.LinkConnecting)                    // a: alive, not yet claimed
		h.setLink(lb.ID, store.LinkConnecting, store.LinkApplied) // b: not reported, Applied
		h.setLink(lc.ID, store.LinkConnecting, store.LinkApplied) // c: reported dead
		h.setLink(ld.ID, store.LinkConnecting)                    // d: not reported, not Applied
		reg := h.register("cloud", "n1", true,
			ConnectionReport{LinkID: la.ID, Alive: true}, ConnectionReport{LinkID: lc.ID, Alive: false})

		if got := h.link(la.ID); got.Status != store.LinkApplied || got.DestNodeID != "cloud/n1" {
			t.Errorf("alive link: %s dest %q, want applied and claimed by cloud/n1", got.Status, got.DestNodeID)
		}
		if got := h.link(lb.ID); got.Status != store.LinkApplied {
			t.Errorf("trusted link: %s, want applied", got.Status)
		}
		if got := h.link(lc.ID); got.Status != store.LinkPending {
			t.Errorf("dead link: %s, want pending", got.Status)
		}
		if got := h.link(ld.ID); got.Status != store.LinkPending {
			t.Errorf("unreported connecting link: %s, want pending", got.Status)
		}
		// Alive and trusted links need no link reconcile; the reset ones do, at their source.
		equalStrings(t, "link nodes", reg.LinkNodes, []string{"c/n1", "cloud/n1", "d/n1"})
		equalStrings(t, "route nodes", reg.RouteNodes, []string{"cloud/n1"})
		if reg.Session != 2 {
			t.Errorf("session = %d, want 2", reg.Session)
		}
	})
}

// TestRegisterEndpointChanged: a destination whose external endpoint changes gets its
// links re-pointed and reset; one that loses it gets them replaced, now dialling out.
func TestRegisterEndpointChanged(t *testing.T) {
	bothStores(t, func(t *testing.T, open func(testing.TB) store.Store) {
		h := newHarness(t, open(t), starTopology, 1)
		h.register("cloud", "n1", true)
		h.register("a", "n1", true)
		h.register("b", "n1", true)
		h.claimAll()
		la, lb := h.linkFrom("a/n1"), h.linkFrom("b/n1")

		_, err := h.svc.NodeRegistered(h.ctx, Registration{NodeID: "n1", Group: "cloud",
			ConnDetails: []store.ConnectionDetails{{Endpoint: "x:1", ExternalEndpoint: "new.example:443"}},
			Connections: []ConnectionReport{{LinkID: la.ID, Alive: true}}})
		h.must(err)
		for _, id := range []string{la.ID, lb.ID} {
			l := h.link(id)
			var cc ClientConfig
			h.must(json.Unmarshal([]byte(l.ConnConfig), &cc))
			if l.DestEndpoint != "new.example:443" || cc.Endpoint != "new.example:443" || l.Status != store.LinkPending {
				t.Errorf("link %s: endpoint %q config %q status %s", id, l.DestEndpoint, cc.Endpoint, l.Status)
			}
		}

		reg, err := h.svc.NodeRegistered(h.ctx, Registration{NodeID: "n1", Group: "cloud",
			ConnDetails: []store.ConnectionDetails{{Endpoint: "x:1"}}})
		h.must(err)
		for _, id := range []string{la.ID, lb.ID} {
			if l := h.link(id); !l.Deleted {
				t.Errorf("link %s to a node without external endpoint is %s, want deleted", id, l.Status)
			}
		}
		equalStrings(t, "replacement links", h.linkStrings(), []string{"cloud/n1->a/n1", "cloud/n1->b/n1"})
		equalStrings(t, "link nodes", reg.LinkNodes, []string{"a/n1", "b/n1", "cloud/n1"})
	})
}

// TestEnsureLinksRandomTarget: the target in the remote group is random, drawn from the
// injected source, so a seed fixes it and different seeds spread the load.
func TestEnsureLinksRandomTarget(t *testing.T) {
	bothStores(t, func(t *testing.T, open func(testing.TB) store.Store) {
		target := func(seed uint64) string {
			h := newHarness(t, open(t), starTopology, seed)
			for _, id := range []string{"c1", "c2", "c3"} {
				h.register("cloud", id, true)
			}
			h.register("a", "n1", false)
			return h.linkFrom("a/n1").TargetNodeID
		}
		seen := map[string]bool{}
		for seed := range uint64(12) {
			first := target(seed)
			if again := target(seed); again != first {
				t.Fatalf("seed %d: target %s then %s", seed, first, again)
			}
			seen[first] = true
		}
		if len(seen) < 2 {
			t.Fatalf("12 seeds all chose %v: target is not random", seen)
		}
	})
}

// TestEnsureLinksDirection covers who dials whom, and the error when nobody can be dialled.
func TestEnsureLinksDirection(t *testing.T) {
	bothStores(t, func(t *testing.T, open func(testing.TB) store.Store) {
		t.Run("remote has external endpoint", func(t *testing.T) {
			h := newHarness(t, open(t), starTopology, 1)
			h.register("cloud", "n1", true)
			res := h.register("a", "n1", false)
			equalStrings(t, "links", h.linkStrings(), []string{"a/n1->cloud/n1"})
			l := h.linkFrom("a/n1")
			if l.DestGroup != "cloud" || l.DestNodeID != "" || l.DestEndpoint != "cloud/n1.example:443" ||
				l.Status != store.LinkPending {
				t.Fatalf("new link = %+v", l)
			}
			var cc ClientConfig
			h.must(json.Unmarshal([]byte(l.ConnConfig), &cc))
			want := ClientConfig{Endpoint: "cloud/n1.example:443", LinkID: l.ID, BackoffInitial: "1s",
				TLS: ClientTLS{SpireSocketPath: "/run/spire.sock"}, Segments: []string{DefaultSegment}}
			if !reflect.DeepEqual(cc, want) {
				t.Fatalf("client config = %+v, want %+v", cc, want)
			}
			equalStrings(t, "link nodes", res.LinkNodes, []string{"a/n1"})
		})
		t.Run("only the new node has one", func(t *testing.T) {
			h := newHarness(t, open(t), starTopology, 1)
			h.register("cloud", "n1", false)
			h.register("cloud", "n2", false)
			res := h.register("a", "n1", true)
			links := h.links(store.LinkFilter{})
			if len(links) != 1 || links[0].TargetNodeID != "a/n1" || links[0].SourceGroup != "cloud" {
				t.Fatalf("links = %+v, want one from cloud to a/n1", links)
			}
			equalStrings(t, "link nodes", res.LinkNodes, []string{"a/n1", links[0].SourceNodeID})
		})
		t.Run("a sibling has one", func(t *testing.T) {
			h := newHarness(t, open(t), starTopology, 1)
			h.register("a", "ext", true)
			h.register("cloud", "n1", false)
			h.links(store.LinkFilter{})
			equalStrings(t, "links", h.linkStrings(), []string{"cloud/n1->a/ext"})
			// A second a node without one finds the pair linked already.
			h.register("a", "plain", false)
			equalStrings(t, "links", h.linkStrings(), []string{"cloud/n1->a/ext"})
		})
		t.Run("neither side has one", func(t *testing.T) {
			h := newHarness(t, open(t), starTopology, 1)
			h.register("cloud", "n1", false)
			res := h.register("a", "n1", false)
			if len(h.links(store.LinkFilter{})) != 0 {
				t.Fatal("link created without an external endpoint")
			}
			if len(res.Problems) != 1 || !errors.Is(res.Problems[0], ErrNoExternalEndpoint) ||
				!strings.Contains(res.Problems[0].Error(), `"a" and "cloud"`) {
				t.Fatalf("problems = %v, want ErrNoExternalEndpoint naming a and cloud", res.Problems)
			}
		})
		t.Run("same group and ungrouped nodes get no link", func(t *testing.T) {
			h := newHarness(t, open(t), "topology:\n  links: [{group: \"*\", neighbors: [\"*\"]}]\n", 1)
			h.register("a", "n1", true)
			h.register("a", "n2", true)
			_, err := h.svc.NodeRegistered(h.ctx, Registration{NodeID: "bare", ConnDetails: details("bare", true)})
			h.must(err)
			equalStrings(t, "links", h.linkStrings(), nil)
		})
	})
}

func TestDefaultLinkIDsAreUUIDs(t *testing.T) {
	h := newHarness(t, stores[0].open(t), starTopology, 1)
	h.svc.newID = uuid.NewString
	h.register("cloud", "n1", true)
	h.register("a", "n1", true)
	if _, err := uuid.Parse(h.linkFrom("a/n1").ID); err != nil {
		t.Fatal(err)
	}
	st := stores[0].open(t)
	svc, err := New(h.ctx, Options{Store: st})
	h.must(err)
	if id := svc.newID(); uuid.Validate(id) != nil {
		t.Fatalf("default link id %q is not a UUID", id)
	}
}

// TestClaimLink: claim fills the destination, marks Applied and is refused for the wrong
// group, unknown ids and deleted links.
func TestClaimLink(t *testing.T) {
	bothStores(t, func(t *testing.T, open func(testing.TB) store.Store) {
		h := newHarness(t, open(t), starTopology, 1)
		h.register("cloud", "n1", true)
		h.register("cloud", "n2", true)
		h.register("a", "n1", true)
		l := h.linkFrom("a/n1")
		h.setLink(l.ID, store.LinkConnecting)

		_, err := h.svc.ClaimLink(h.ctx, "a/n1", l.ID)
		if !errors.Is(err, ErrClaimRejected) {
			t.Fatalf("claim from the source group: %v, want ErrClaimRejected", err)
		}
		_, err = h.svc.ClaimLink(h.ctx, "cloud/n1", "no-such-link")
		if !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("claim of unknown link: %v", err)
		}
		_, err = h.svc.ClaimLink(h.ctx, "cloud/zz", l.ID)
		if !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("claim by unknown node: %v", err)
		}
		// Behind a shared ingress the claimer need not be the target.
		other := "cloud/n1"
		if l.TargetNodeID == other {
			other = "cloud/n2"
		}
		res, err := h.svc.ClaimLink(h.ctx, other, l.ID)
		h.must(err)
		if got := h.link(l.ID); got.DestNodeID != other || got.Status != store.LinkApplied {
			t.Fatalf("claimed link = %+v", got)
		}
		equalStrings(t, "route nodes", res.RouteNodes, []string{"a/n1", other})
		res, err = h.svc.ClaimLink(h.ctx, other, l.ID)
		h.must(err)
		if len(res.LinkNodes)+len(res.RouteNodes) != 0 {
			t.Fatalf("repeated claim did work: %+v", res)
		}
		_, err = store.MarkLinkDeleted(h.ctx, h.st, l.ID)
		h.must(err)
		if _, err = h.svc.ClaimLink(h.ctx, other, l.ID); !errors.Is(err, ErrClaimRejected) {
			t.Fatalf("claim of deleted link: %v", err)
		}
	})
}

func TestRegistrationValidation(t *testing.T) {
	h := newHarness(t, stores[0].open(t), starTopology, 1)
	for _, reg := range []Registration{
		{NodeID: ""}, {NodeID: "a/b", Group: "g"}, {NodeID: "n 1"}, {NodeID: "n1", Group: "bad group"},
		{NodeID: "n1", Group: "g", ConnDetails: []store.ConnectionDetails{{ExternalEndpoint: "x:1"}}},
	} {
		if _, err := h.svc.NodeRegistered(h.ctx, reg); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("%+v: %v, want ErrInvalidArgument", reg, err)
		}
	}
	if _, err := h.svc.AddWildcardRoute(h.ctx, "g/n1", store.NewName("a", "", "c")); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("empty name component: %v", err)
	}
	if _, err := h.svc.AddWildcardRoute(h.ctx, "g/none", store.NewName("a", "b", "c")); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("announce by unknown node: %v", err)
	}
}
