package controlplane

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/switchboard-mesh/switchboard/controlplane/store"
)

// randomScenario drives a service through a random topology, registration order,
// claims and announcements, all interleaved, then claims whatever is left.
type randomScenario struct {
	topology string
	groups   []string
	steps    []func(h *harness)
}

func newRandomScenario(r *rand.Rand) randomScenario {
	ng := 2 + r.IntN(7)
	var sc randomScenario
	for i := range ng {
		sc.groups = append(sc.groups, fmt.Sprintf("g%d", i))
	}
	var b strings.Builder
	b.WriteString("topology:\n  links:\n")
	switch r.IntN(5) {
	case 0: // a star around a random hub
		fmt.Fprintf(&b, "    - {group: %s, neighbors: [\"*\"]}\n", sc.groups[r.IntN(ng)])
	case 1:
		b.WriteString("    - {group: \"*\", neighbors: [\"*\"]}\n")
	default: // a random graph, often with cycles and sometimes in pieces
		density := 0.15 + r.Float64()*0.6
		for i := range ng {
			var nb []string
			for j := i + 1; j < ng; j++ {
				if r.Float64() < density {
					nb = append(nb, sc.groups[j])
				}
			}
			if len(nb) > 0 {
				fmt.Fprintf(&b, "    - {group: %s, neighbors: [%s]}\n", sc.groups[i], strings.Join(nb, ", "))
			}
		}
	}
	sc.topology = b.String()
	var nodes []string
	for _, g := range sc.groups {
		for n := range 1 + r.IntN(2) {
			nodes = append(nodes, NodeID(g, fmt.Sprintf("n%d", n)))
		}
	}
	r.Shuffle(len(nodes), func(i, j int) { nodes[i], nodes[j] = nodes[j], nodes[i] })
	names := []string{"org/ns/one", "org/ns/two", "org/ns/three/7"}
	for i, id := range nodes {
		ext := r.IntN(4) > 0
		sc.steps = append(sc.steps, func(h *harness) {
			h.register(GroupOf(id), strings.TrimPrefix(id, GroupOf(id)+"/"), ext)
		})
		// Announce from any registered node, in random order, sometimes before claims.
		for range r.IntN(3) {
			announcer, name := nodes[r.IntN(i+1)], names[r.IntN(len(names))]
			sc.steps = append(sc.steps, func(h *harness) { h.announce(announcer, name) })
		}
		if r.IntN(2) == 0 {
			sc.steps = append(sc.steps, func(h *harness) { h.claimAll() })
		}
	}
	return sc
}

func (sc randomScenario) run(t testing.TB, st store.Store, seed uint64) *harness {
	h := newHarness(t, st, sc.topology, seed)
	for _, step := range sc.steps {
		step(h)
	}
	h.claimAll()
	return h
}

// checkForwarding verifies, per announced name, on the stored routes: route edges are
// linked topology edges, they form no cycle (so forwarding cannot loop), and every group
// reaches every announcer's group in its linked component by following routes.
func checkForwarding(t testing.TB, h *harness) {
	t.Helper()
	segs, err := h.svc.Segments(h.ctx)
	h.must(err)
	links := h.links(store.LinkFilter{})
	linked := map[[2]string]bool{}
	for _, l := range links {
		linked[pair(l.SourceGroup, l.DestGroup)] = true
	}
	adj := map[string][]string{} // the linked topology
	for _, s := range segs {
		for _, e := range s.Edges {
			if linked[e] {
				adj[e[0]] = append(adj[e[0]], e[1])
				adj[e[1]] = append(adj[e[1]], e[0])
			}
		}
	}
	linkPeer := map[string]store.Link{}
	for _, l := range links {
		linkPeer[l.ID] = l
	}
	routes := map[store.Name][][2]string{}
	announcers := map[store.Name][]string{}
	for _, r := range h.routes(store.RouteFilter{}) {
		if r.IsTemplate() {
			announcers[r.Name] = append(announcers[r.Name], GroupOf(r.DestNodeID))
			continue
		}
		l, ok := linkPeer[r.LinkID]
		if !ok {
			t.Fatalf("route %+v over a link that is not live", r)
		}
		from := GroupOf(r.SourceNodeID)
		routes[r.Name] = append(routes[r.Name], [2]string{from, l.Peer(from)})
	}
	for name, edges := range routes {
		checkAcyclic(t, name, edges, adj)
	}
	for name, groups := range announcers {
		checkReachable(t, name, routes[name], groups, adj)
	}
}

func checkAcyclic(t testing.TB, name store.Name, edges [][2]string, adj map[string][]string) {
	t.Helper()
	parent := map[string]string{}
	var find func(string) string
	find = func(x string) string {
		if p, ok := parent[x]; ok && p != x {
			root := find(p)
			parent[x] = root
			return root
		}
		parent[x] = x
		return x
	}
	seen := map[[2]string]bool{}
	for _, e := range edges {
		if !slices.Contains(adj[e[0]], e[1]) {
			t.Fatalf("%s: route %s->%s is not a linked topology edge", name, e[0], e[1])
		}
		u := pair(e[0], e[1])
		if seen[u] {
			continue // both directions of one tree edge
		}
		seen[u] = true
		a, b := find(e[0]), find(e[1])
		if a == b {
			t.Fatalf("%s: routes form a cycle through %s-%s: %v", name, e[0], e[1], edges)
		}
		parent[a] = b
	}
}

func checkReachable(t testing.TB, name store.Name, edges [][2]string, announcers []string, adj map[string][]string) {
	t.Helper()
	next := map[string][]string{}
	for _, e := range edges {
		next[e[0]] = append(next[e[0]], e[1])
	}
	reach := func(from string, graph map[string][]string) map[string]bool {
		seen := map[string]bool{from: true}
		queue := []string{from}
		for len(queue) > 0 {
			v := queue[0]
			queue = queue[1:]
			for _, w := range graph[v] {
				if !seen[w] {
					seen[w] = true
					queue = append(queue, w)
				}
			}
		}
		return seen
	}
	for _, target := range announcers {
		for g := range reach(target, adj) { // every group linked to the announcer's
			if !reach(g, next)[target] {
				t.Fatalf("%s: group %s cannot reach announcer group %s; routes %v", name, g, target, edges)
			}
		}
	}
}

// TestRouteExpansionProperty: random topologies, orders and interleavings never loop and
// always reach every announcer; the result is steady and the same on both stores.
func TestRouteExpansionProperty(t *testing.T) {
	total := 0
	for seed := range uint64(60) {
		sc := newRandomScenario(rand.New(rand.NewPCG(seed, 99)))
		h := sc.run(t, stores[0].open(t), seed)
		checkForwarding(t, h)
		total += len(h.routeStrings())
		h.steady()
		if seed%10 == 0 { // the SQLite store must decide identically
			h2 := sc.run(t, stores[1].open(t), seed)
			equalStrings(t, fmt.Sprintf("seed %d sqlite routes", seed), h2.routeStrings(), h.routeStrings())
			equalStrings(t, fmt.Sprintf("seed %d sqlite links", seed), h2.linkStrings(), h.linkStrings())
		}
	}
	if total < 200 {
		t.Fatalf("only %d routes over 60 scenarios: the generator does not exercise expansion", total)
	}
	t.Logf("%d routes checked", total)
}

// FuzzRouteExpansion explores scenarios from fuzzed seeds; normal test runs use the seed
// corpus only.
func FuzzRouteExpansion(f *testing.F) {
	for _, s := range []uint64{0, 1, 7, 42, 1 << 40} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, seed uint64) {
		h := newRandomScenario(rand.New(rand.NewPCG(seed, 7))).run(t, stores[0].open(t), seed)
		checkForwarding(t, h)
		h.steady()
	})
}

// TestSegmentPlannerProperty checks the planner per segment for random segment sets
// ($group templates and named segments): each segment's tree is loop-free and reaches
// every announcer in it, and together the segments keep every segment's routes.
func TestSegmentPlannerProperty(t *testing.T) {
	for seed := range uint64(200) {
		r := rand.New(rand.NewPCG(seed, 5))
		ng := 2 + r.IntN(8)
		groups := make([]string, ng)
		for i := range groups {
			groups[i] = fmt.Sprintf("g%d", i)
		}
		var yml strings.Builder
		yml.WriteString("topology:\n  segments:\n")
		if r.IntN(2) == 0 {
			fmt.Fprintf(&yml, "    - {name: t-$group, links: [{group: %s, neighbors: [$group]}]}\n", groups[r.IntN(ng)])
		}
		for s := range 1 + r.IntN(3) {
			fmt.Fprintf(&yml, "    - name: s%d\n      links:\n", s)
			for range 1 + r.IntN(ng) {
				a, b := groups[r.IntN(ng)], groups[r.IntN(ng)]
				if a != b {
					fmt.Fprintf(&yml, "        - {group: %s, neighbors: [%s]}\n", a, b)
				}
			}
			fmt.Fprintf(&yml, "        - {group: %s, neighbors: [\"*\"]}\n", groups[r.IntN(ng)])
		}
		segs := Resolve(topology(t, yml.String()), groups)
		links := fullyLinked(segs)
		var anns []announcer
		for range 1 + r.IntN(4) {
			g := groups[r.IntN(ng)]
			anns = append(anns, announcer{node: g + "/n1", group: g})
		}
		name := store.NewName("o", "n", "s")
		all := newPlanner(segs, links)
		all.plan(name, anns)
		union := map[string]bool{}
		for _, d := range all.out {
			union[d.key()] = true
		}
		for _, seg := range segs {
			one := newPlanner([]Segment{seg}, links)
			one.plan(name, anns)
			checkSegmentPlan(t, seg, one.out, anns, union, links)
		}
	}
}

// fullyLinked returns one claimed link per edge of any segment.
func fullyLinked(segs []Segment) []store.Link {
	var out []store.Link
	for e := range allowedPairs(segs) {
		out = append(out, store.Link{ID: e[0] + "-" + e[1], SourceGroup: e[0], SourceNodeID: e[0] + "/n1",
			DestGroup: e[1], DestNodeID: e[1] + "/n1"})
	}
	slices.SortFunc(out, func(a, b store.Link) int { return strings.Compare(a.ID, b.ID) })
	return out
}

func checkSegmentPlan(t *testing.T, seg Segment, out []desiredRoute, anns []announcer, union map[string]bool, links []store.Link) {
	t.Helper()
	byID := map[string]store.Link{}
	for _, l := range links {
		byID[l.ID] = l
	}
	adj := map[string][]string{}
	for _, e := range seg.Edges {
		adj[e[0]] = append(adj[e[0]], e[1])
		adj[e[1]] = append(adj[e[1]], e[0])
	}
	var edges [][2]string
	for _, d := range out {
		if !union[d.key()] {
			t.Fatalf("segment %s route %+v missing from the all-segment plan", seg.Name, d)
		}
		from := GroupOf(d.source())
		edges = append(edges, [2]string{from, byID[d.linkID()].Peer(from)})
	}
	name := store.NewName("o", "n", "s")
	checkAcyclic(t, name, edges, adj)
	var in []string
	for _, a := range anns {
		if _, ok := adj[a.group]; ok {
			in = append(in, a.group)
		}
	}
	checkReachable(t, name, edges, in, adj)
}
