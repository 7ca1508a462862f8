package controlplane

import (
	"slices"
	"testing"

	"github.com/switchboard-mesh/switchboard/controlplane/config"
	"github.com/switchboard-mesh/switchboard/controlplane/store"
)

// TestTopologies registers one node per group (in order, all with external endpoints),
// claims every link, announces names in order, and checks the exact links
// ("source->target") and routes ("gateway->peer-group name @announcer").
func TestTopologies(t *testing.T) {
	cases := []struct {
		name     string
		topology string
		groups   []string
		announce [][2]string // node, name
		links    []string
		routes   []string
		segments []string
	}{
		{
			name:     "star",
			topology: "topology:\n  links:\n    - {group: cloud, neighbors: [\"*\"]}\n",
			groups:   []string{"cloud", "a", "b", "c"},
			announce: [][2]string{{"a/n1", "org/ns/svc"}, {"b/n1", "org/ns/svc"}},
			links:    []string{"a/n1->cloud/n1", "b/n1->cloud/n1", "c/n1->cloud/n1"},
			routes: []string{
				// rooted at a: everyone else points toward a ...
				"b/n1->cloud org/ns/svc @a/n1",
				"c/n1->cloud org/ns/svc @a/n1",
				"cloud/n1->a org/ns/svc @a/n1",
				// ... and the path from b up to a carries b's announcement down to b.
				"a/n1->cloud org/ns/svc @b/n1",
				"cloud/n1->b org/ns/svc @b/n1",
			},
			segments: []string{DefaultSegment},
		},
		{
			name:     "full mesh",
			topology: "topology:\n  links:\n    - {group: \"*\", neighbors: [\"*\"]}\n",
			groups:   []string{"a", "b", "c"},
			announce: [][2]string{{"c/n1", "org/ns/svc"}, {"a/n1", "org/ns/svc"}},
			links:    []string{"b/n1->a/n1", "c/n1->a/n1", "c/n1->b/n1"},
			routes: []string{
				// every group is one hop from the root c: no route uses the a-b link.
				"a/n1->c org/ns/svc @c/n1",
				"b/n1->c org/ns/svc @c/n1",
				"c/n1->a org/ns/svc @a/n1",
			},
			segments: []string{DefaultSegment},
		},
		{
			name:     "explicit pairs",
			topology: "topology:\n  links:\n    - {group: cloud, neighbors: [customer-a, customer-b]}\n",
			groups:   []string{"cloud", "customer-a", "customer-b", "other"},
			announce: [][2]string{{"customer-b/n1", "org/ns/svc"}},
			links:    []string{"customer-a/n1->cloud/n1", "customer-b/n1->cloud/n1"},
			routes: []string{
				"cloud/n1->customer-b org/ns/svc @customer-b/n1",
				"customer-a/n1->cloud org/ns/svc @customer-b/n1",
			},
			segments: []string{DefaultSegment},
		},
		{
			name: "chain",
			topology: "topology:\n  links:\n    - {group: group-a, neighbors: [group-b]}\n" +
				"    - {group: group-b, neighbors: [group-c]}\n    - {group: group-c, neighbors: [group-d]}\n",
			groups:   []string{"group-a", "group-b", "group-c", "group-d"},
			announce: [][2]string{{"group-d/n1", "org/ns/svc"}, {"group-a/n1", "org/ns/svc"}},
			links:    []string{"group-b/n1->group-a/n1", "group-c/n1->group-b/n1", "group-d/n1->group-c/n1"},
			routes: []string{
				"group-a/n1->group-b org/ns/svc @group-d/n1",
				"group-b/n1->group-a org/ns/svc @group-a/n1",
				"group-b/n1->group-c org/ns/svc @group-d/n1",
				"group-c/n1->group-b org/ns/svc @group-a/n1",
				"group-c/n1->group-d org/ns/svc @group-d/n1",
				"group-d/n1->group-c org/ns/svc @group-a/n1",
			},
			segments: []string{DefaultSegment},
		},
		{
			name: "group template segments",
			// The top-level links would join ca and cb; with segments they are ignored.
			topology: "topology:\n  links:\n    - {group: \"*\", neighbors: [\"*\"]}\n  segments:\n" +
				"    - name: segment-$group\n      links:\n        - {group: cloud, neighbors: [$group]}\n",
			groups:   []string{"cloud", "ca", "cb"},
			announce: [][2]string{{"ca/n1", "org/ns/a"}, {"cloud/n1", "org/ns/c"}},
			links:    []string{"ca/n1->cloud/n1", "cb/n1->cloud/n1"},
			routes: []string{
				// cloud reaches ca's name; cb does not (other segment).
				"cloud/n1->ca org/ns/a @ca/n1",
				// cloud's name is reachable from both customers, each in its segment.
				"ca/n1->cloud org/ns/c @cloud/n1",
				"cb/n1->cloud org/ns/c @cloud/n1",
			},
			segments: []string{"segment-ca", "segment-cb", "segment-cloud"},
		},
		{
			name: "named segments",
			topology: "topology:\n  segments:\n    - name: customer-1\n      links: [{group: cloud, neighbors: [cluster-a]}]\n" +
				"    - name: customer-2\n      links: [{group: cloud, neighbors: [cluster-b, cluster-c]}]\n",
			groups:   []string{"cloud", "cluster-a", "cluster-b", "cluster-c"},
			announce: [][2]string{{"cluster-b/n1", "org/ns/svc"}},
			links:    []string{"cluster-a/n1->cloud/n1", "cluster-b/n1->cloud/n1", "cluster-c/n1->cloud/n1"},
			routes: []string{
				"cloud/n1->cluster-b org/ns/svc @cluster-b/n1",
				"cluster-c/n1->cloud org/ns/svc @cluster-b/n1",
			},
			segments: []string{"customer-1", "customer-2"},
		},
	}
	bothStores(t, func(t *testing.T, open func(testing.TB) store.Store) {
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				h := newHarness(t, open(t), c.topology, 1)
				for _, g := range c.groups {
					h.register(g, "n1", true)
				}
				equalStrings(t, "links", h.linkStrings(), c.links)
				h.claimAll()
				for _, a := range c.announce {
					h.announce(a[0], a[1])
				}
				want := slices.Clone(c.routes)
				slices.Sort(want) // the table groups them by meaning
				equalStrings(t, "routes", h.routeStrings(), want)
				for _, r := range h.routes(store.RouteFilter{}) {
					want := store.RoutePending
					if r.IsTemplate() {
						want = store.RouteApplied
					}
					if r.Status != want {
						t.Errorf("route %s on %s is %s, want %s", r.Name, r.SourceNodeID, r.Status, want)
					}
				}
				segs, err := h.svc.Segments(h.ctx)
				h.must(err)
				var names []string
				for _, s := range segs {
					names = append(names, s.Name)
				}
				equalStrings(t, "segments", names, c.segments)
				h.steady()
			})
		}
	})
}

// TestRoutesWaitForClaim: a route on the destination side of a link needs the claim; the
// claim triggers the expansion.
func TestRoutesWaitForClaim(t *testing.T) {
	bothStores(t, func(t *testing.T, open func(testing.TB) store.Store) {
		h := newHarness(t, open(t), "topology:\n  links: [{group: cloud, neighbors: [\"*\"]}]\n", 1)
		h.register("cloud", "n1", true)
		h.register("a", "n1", true)
		h.announce("a/n1", "org/ns/svc")
		// cloud's gateway for link a->cloud is whoever receives it: unknown yet.
		equalStrings(t, "routes before claim", h.routeStrings(), nil)
		l := h.links(store.LinkFilter{})[0]
		res, err := h.svc.ClaimLink(h.ctx, "cloud/n1", l.ID)
		h.must(err)
		equalStrings(t, "routes after claim", h.routeStrings(), []string{"cloud/n1->a org/ns/svc @a/n1"})
		equalStrings(t, "route nodes", res.RouteNodes, []string{"a/n1", "cloud/n1"})
	})
}

// TestPending: a link between two named groups is pending while one of them has no
// node; "*" and "$group" links never are (they stand for registered groups), and
// top-level links are the default segment's.
func TestPending(t *testing.T) {
	stored := []store.Segment{
		{Name: "default", Links: []store.SegmentLink{
			store.NewSegmentLink("default", "cloud", "customer-a"),
			store.NewSegmentLink("default", "cloud", "edge"),
			store.NewSegmentLink("default", "cloud", "*"),
			store.NewSegmentLink("default", "lab", "customer-a"),
		}},
		{Name: "tenant-$group", Links: []store.SegmentLink{
			store.NewSegmentLink("tenant-$group", "$group", "cloud"),
			store.NewSegmentLink("tenant-$group", "cloud", "lab"),
		}},
		{Name: "empty"},
	}
	rules := SegmentRules(stored)
	groups := []string{"cloud", "edge"}
	got := Pending(rules, Resolve(rules, groups))
	want := []Segment{
		{Name: "default", Edges: [][2]string{{"cloud", "customer-a"}, {"customer-a", "lab"}}},
		{Name: "tenant-$group", Edges: [][2]string{{"cloud", "lab"}}},
	}
	if !slices.EqualFunc(got, want, func(a, b Segment) bool { return a.Name == b.Name && slices.Equal(a.Edges, b.Edges) }) {
		t.Fatalf("Pending = %v, want %v", got, want)
	}
	if got := Pending(rules, Resolve(rules, []string{"cloud", "customer-a", "edge", "lab"})); len(got) != 0 {
		t.Fatalf("every group has a node and Pending = %v", got)
	}
	top := &config.Topology{Links: []config.Link{{Group: "cloud", Neighbors: []string{"edge", "customer-b"}}}}
	if got := Pending(top, Resolve(top, groups)); len(got) != 1 || got[0].Name != DefaultSegment ||
		!slices.Equal(got[0].Edges, [][2]string{{"cloud", "customer-b"}}) {
		t.Fatalf("top-level links: Pending = %v", got)
	}
	if Pending(nil, nil) != nil {
		t.Fatal("no rules, and something is pending")
	}
}
