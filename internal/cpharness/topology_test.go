package cpharness

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/switchboard-mesh/switchboard/controlplane/store"
)

// routeSpots lists the live routes as sorted "group@linkpair": the group of the node
// holding the subscription and the groups its link joins. Each route must sit on an
// end of its link.
func routeSpots(t *testing.T, st store.Store) ([]string, error) {
	t.Helper()
	var out []string
	for _, r := range routesOf(t, st) {
		l, err := st.GetLink(context.Background(), r.LinkID)
		if err != nil {
			return nil, fmt.Errorf("route %d over missing link %s: %w", r.ID, r.LinkID, err)
		}
		if r.SourceNodeID != l.SourceNodeID && r.SourceNodeID != l.DestNodeID {
			return nil, fmt.Errorf("route %d is on %s, which is neither end of link %s (%s -> %s)", r.ID, r.SourceNodeID, l.ID, l.SourceNodeID, l.DestNodeID)
		}
		a, b := l.SourceGroup, l.DestGroup
		if b < a {
			a, b = b, a
		}
		out = append(out, strings.SplitN(r.SourceNodeID, "/", 2)[0]+"@"+a+"-"+b)
	}
	slices.Sort(out)
	return out, nil
}

// TestTopologies: star, chain and segmented topologies with several nodes per group
// converge — every link and route Applied, and the datapaths hold exactly the
// connections and subscriptions the store describes, on the nodes the SPT picks.
func TestTopologies(t *testing.T) {
	cases := []struct {
		name       string
		topology   string
		groups     []string
		perGroup   int
		announcers []string // node ids, in announcement order
		links      []string
		routes     []string
	}{
		{
			name:       "star",
			topology:   "topology:\n  links:\n    - group: cloud\n      neighbors: ['*']\n",
			groups:     []string{"cloud", "edge-a", "edge-b"},
			perGroup:   2,
			announcers: []string{"edge-a/n1", "edge-b/n2"},
			links:      []string{"cloud-edge-a", "cloud-edge-b"},
			routes:     []string{"cloud@cloud-edge-a", "cloud@cloud-edge-b", "edge-a@cloud-edge-a", "edge-b@cloud-edge-b"},
		},
		{
			name: "chain",
			topology: "topology:\n  links:\n    - group: a\n      neighbors: [b]\n" +
				"    - group: b\n      neighbors: [c]\n    - group: c\n      neighbors: [d]\n",
			groups:     []string{"a", "b", "c", "d"},
			perGroup:   2,
			announcers: []string{"a/n2", "d/n1"},
			links:      []string{"a-b", "b-c", "c-d"},
			routes:     []string{"a@a-b", "b@a-b", "b@b-c", "c@b-c", "c@c-d", "d@c-d"},
		},
		{
			name: "segmented",
			topology: "topology:\n  segments:\n    - name: segment-$group\n      links:\n" +
				"        - group: cloud\n          neighbors: [$group]\n",
			groups:     []string{"cloud", "cust-a", "cust-b"},
			perGroup:   3,
			announcers: []string{"cust-a/n1", "cloud/n3"},
			links:      []string{"cloud-cust-a", "cloud-cust-b"},
			// cust-b reaches cloud but never cust-a: no route toward cust-a on cust-b.
			routes: []string{"cloud@cloud-cust-a", "cust-a@cloud-cust-a", "cust-b@cloud-cust-b"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			forStores(t, func(t *testing.T, db string) {
				c := startCP(t, testConfig(t, db, tc.topology))
				f := newFabric(t)
				startNodes(t, f, c, tc.perGroup, tc.groups...)
				if err := f.WaitRegistered(timeout(t, 20e9)); err != nil {
					t.Fatal(err)
				}
				for _, id := range tc.announcers {
					if err := f.Node(id).Announce(svcName); err != nil {
						t.Fatal(err)
					}
					waitTemplate(t, c, id)
				}
				converge(t, c, f, true, func() error {
					if got := linkPairs(t, c.Store()); !slices.Equal(got, tc.links) {
						return fmt.Errorf("links %v, want %v", got, tc.links)
					}
					got, err := routeSpots(t, c.Store())
					if err == nil && !slices.Equal(got, tc.routes) {
						err = fmt.Errorf("routes %v, want %v", got, tc.routes)
					}
					return err
				})
			})
		})
	}
}

// waitTemplate waits for the announcement of svcName by node to be stored, so that
// announcement order (which roots the SPT) is the test's.
func waitTemplate(t *testing.T, c *cp, node string) {
	t.Helper()
	ctx := timeout(t, 20e9)
	name := store.NewName("org", "ns", "svc")
	err := Eventually(ctx, func() error {
		rs, err := c.Store().ListRoutes(ctx, store.RouteFilter{SourceNodeID: store.AllNodes, DestNodeID: node, Name: &name})
		if err == nil && len(rs) == 0 {
			err = store.NotFound("template of", node)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}
