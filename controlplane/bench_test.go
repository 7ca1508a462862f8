package controlplane

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/switchboard-mesh/switchboard/controlplane/config"
	"github.com/switchboard-mesh/switchboard/controlplane/store"
)

// benchTopology returns n groups and adjacency rules of the given shape.
func benchTopology(shape string, n int) ([]string, *config.Topology) {
	groups := make([]string, n)
	for i := range groups {
		groups[i] = fmt.Sprintf("g%05d", i)
	}
	t := &config.Topology{}
	switch shape {
	case "chain":
		for i := 0; i+1 < n; i++ {
			t.Links = append(t.Links, config.Link{Group: groups[i], Neighbors: []string{groups[i+1]}})
		}
	case "star":
		t.Links = []config.Link{{Group: groups[0], Neighbors: []string{config.Wildcard}}}
	case "random": // a spanning chain in random order plus random edges: average degree 4
		r := rand.New(rand.NewPCG(1, 2))
		perm := r.Perm(n)
		for i := 0; i+1 < n; i++ {
			t.Links = append(t.Links, config.Link{Group: groups[perm[i]], Neighbors: []string{groups[perm[i+1]]}})
		}
		for range n + 1 {
			a, b := r.IntN(n), r.IntN(n)
			if a != b {
				t.Links = append(t.Links, config.Link{Group: groups[a], Neighbors: []string{groups[b]}})
			}
		}
	}
	return groups, t
}

// BenchmarkSPTExpansion measures one wildcard name with three announcers expanded over
// 1,000 and 10,000 groups: "plan" from resolved segments and links (graph, BFS,
// routes), "resolve+plan" also resolving the topology rules against the groups.
func BenchmarkSPTExpansion(b *testing.B) {
	for _, shape := range []string{"chain", "star", "random"} {
		for _, n := range []int{1000, 10000} {
			groups, rules := benchTopology(shape, n)
			segs := Resolve(rules, groups)
			links := fullyLinked(segs)
			r := rand.New(rand.NewPCG(3, 4))
			var anns []announcer
			for range 3 {
				g := groups[r.IntN(n)]
				anns = append(anns, announcer{node: g + "/n1", group: g})
			}
			name := store.NewName("org", "ns", "svc")
			b.Run(fmt.Sprintf("%s/%d/plan", shape, n), func(b *testing.B) {
				var routes int
				for b.Loop() {
					p := newPlanner(segs, links)
					p.plan(name, anns)
					routes = len(p.out)
				}
				b.ReportMetric(float64(routes), "routes")
			})
			b.Run(fmt.Sprintf("%s/%d/resolve+plan", shape, n), func(b *testing.B) {
				for b.Loop() {
					p := newPlanner(Resolve(rules, groups), links)
					p.plan(name, anns)
				}
			})
		}
	}
}

// BenchmarkNodeRegistered measures node_registered for the 1,000th node of a 100-group
// star (10 nodes per group, every link claimed, one name announced in every group).
func BenchmarkNodeRegistered(b *testing.B) {
	for _, st := range stores {
		b.Run(st.name, func(b *testing.B) {
			h := newHarness(b, st.open(b), starTopology, 1)
			h.svc.newID = func() string { return fmt.Sprintf("link-%d", h.svc.rng.Uint64()) }
			groups := []string{"cloud"}
			for i := 1; i < 100; i++ {
				groups = append(groups, fmt.Sprintf("g%02d", i))
			}
			for n := range 10 {
				for _, g := range groups {
					if n == 9 && g == "g50" {
						continue // the 1,000th node
					}
					h.register(g, fmt.Sprintf("n%d", n), g == "cloud")
				}
			}
			h.claimAll()
			for _, g := range groups {
				h.announce(g+"/n0", "org/ns/svc")
			}
			for b.Loop() {
				if _, err := h.svc.NodeRegistered(h.ctx, Registration{NodeID: "n9", Group: "g50",
					ConnDetails: details("g50/n9", false)}); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				if _, err := h.svc.NodeDeregistered(h.ctx, "g50/n9", 0); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
		})
	}
}

// BenchmarkRegisterBigGroup: registration of the 1,000th node of one group (b; a–b
// linked), with none or 100 of its siblings disconnected. It should cost no more than
// in a small group: nothing in a registration lists the whole group.
func BenchmarkRegisterBigGroup(b *testing.B) {
	for _, st := range stores {
		for _, away := range []int{0, 100} {
			b.Run(fmt.Sprintf("%s/away%d", st.name, away), func(b *testing.B) {
				h := newHarness(b, st.open(b), pairTopology, 1)
				h.svc.newID = func() string { return fmt.Sprintf("link-%d", h.svc.rng.Uint64()) }
				h.register("a", "n0", true)
				for i := range 999 {
					h.register("b", fmt.Sprintf("n%d", i), false)
				}
				for i := range away {
					_, err := h.svc.NodeDisconnected(h.ctx, fmt.Sprintf("b/n%d", 998-i), 0)
					h.must(err)
				}
				h.claimAll()
				for b.Loop() {
					if _, err := h.svc.NodeRegistered(h.ctx, Registration{NodeID: "n999", Group: "b",
						ConnDetails: details("b/n999", false)}); err != nil {
						b.Fatal(err)
					}
					b.StopTimer()
					if _, err := h.svc.NodeDeregistered(h.ctx, "b/n999", 0); err != nil {
						b.Fatal(err)
					}
					b.StartTimer()
				}
			})
		}
	}
}
