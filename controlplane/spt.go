package controlplane

import (
	"slices"

	"github.com/switchboard-mesh/switchboard/controlplane/store"
)

// The planner works on group indices, not names: the groups are numbered in name order
// once, so a breadth-first search over sorted adjacency lists breaks ties by name (and
// stays stable as groups come and go) without sorting or hashing strings per step.

// graph is one segment's linked topology in compressed form: the neighbours of v are
// adj[start[v]:start[v+1]], in name order.
type graph struct {
	segment string
	start   []int32
	adj     []int32
	// trees caches one BFS per root: names announced first in the same group share it.
	trees map[int32]*tree
}

func (g *graph) neighbours(v int32) []int32 { return g.adj[g.start[v]:g.start[v+1]] }

// tree is a shortest path tree: parent[v] is v's parent, the root is its own parent and
// -1 marks groups outside the root's component. order lists the component in BFS order.
type tree struct {
	parent []int32
	order  []int32
}

// tree returns the BFS tree rooted at root: O(V+E) the first time, cached after.
func (g *graph) tree(root int32) *tree {
	if t, ok := g.trees[root]; ok {
		return t
	}
	t := &tree{parent: make([]int32, len(g.start)-1), order: make([]int32, 0, 64)}
	for i := range t.parent {
		t.parent[i] = -1
	}
	t.parent[root] = root
	t.order = append(t.order, root)
	for head := 0; head < len(t.order); head++ {
		v := t.order[head]
		for _, w := range g.neighbours(v) {
			if t.parent[w] < 0 {
				t.parent[w] = v
				t.order = append(t.order, w)
			}
		}
	}
	g.trees[root] = t
	return t
}

// announcer is one node that announced a name (one wildcard template), in announcement
// order.
type announcer struct {
	node  string
	group string
}

// hop is one live link between two groups, with the node holding it on each side; the
// destination side is empty until the link is claimed.
type hop struct {
	linkID           string
	srcGroup, dstGrp int32
	srcNode, dstNode string
}

// gateway returns the node of group g that holds the link, or "".
func (h *hop) gateway(g int32) string {
	if g == h.srcGroup {
		return h.srcNode
	}
	return h.dstNode
}

func edgeKey(a, b int32) uint64 {
	if b < a {
		a, b = b, a
	}
	return uint64(a)<<32 | uint64(uint32(b))
}

// desiredRoute is one subscription the SPT wants: on one side of a link, for one name,
// leading to one announcer. It holds indices so that planning 10,000 groups stays cheap.
type desiredRoute struct {
	hop     *hop
	srcSide bool
	name    *store.Name
	dest    string
}

func (d desiredRoute) source() string {
	if d.srcSide {
		return d.hop.srcNode
	}
	return d.hop.dstNode
}

func (d desiredRoute) linkID() string { return d.hop.linkID }

func (d desiredRoute) key() string {
	return store.Route{SourceNodeID: d.source(), LinkID: d.hop.linkID, Name: *d.name}.Key()
}

func (d desiredRoute) rkey() routeKey {
	return routeKey{source: d.source(), link: d.hop.linkID, name: *d.name}
}

// routeKey is store.Route.Key for expansions, as a comparable value: diffing a plan
// against thousands of stored routes need not build a string per route.
type routeKey struct {
	source, link string
	name         store.Name
}

// routeID identifies a subscription while planning: the same name over the same link on
// the same side is one subscription whichever tree asks for it.
type routeID struct {
	name, hop int32
	srcSide   bool
}

// linked is the planner's view of the linked topology: the groups of the segments
// numbered in name order, one hop per linked group pair, and each segment's graph of
// linked edges with its cached trees. It outlives one plan: the service keeps it
// while the links only change ends (a claim, a failover), which moves no edge.
type linked struct {
	topo   *resolved // the resolved topology it was made for
	groups []string
	index  map[string]int32
	graphs []*graph
	hops   []hop
	byEdge map[uint64]int32
	byLink map[string]int32 // the hop of each link that carries its pair
}

// planner computes the wanted expansions of every wildcard name. It is pure: the same
// segments, links and announcements always give the same routes in the same order.
type planner struct {
	*linked
	out   []desiredRoute
	seen  map[routeID]bool
	names int32
}

// newPlanner indexes the groups of the segments and the live links, and builds each
// segment's graph from the edges that have a link: a topology edge nobody could link
// (no external endpoint on either side) must not carry the tree.
func newPlanner(segs []Segment, links []store.Link) *planner {
	return newLinked(segs, links).planner()
}

func (l *linked) planner() *planner {
	return &planner{linked: l, seen: map[routeID]bool{}}
}

// newLinked builds the view; links must be sorted by id.
func newLinked(segs []Segment, links []store.Link) *linked {
	p := &linked{index: map[string]int32{}, byEdge: make(map[uint64]int32, len(links)),
		hops: make([]hop, 0, len(links)), byLink: make(map[string]int32, len(links))}
	edges := make([][][2]int32, len(segs))
	for i, s := range segs {
		edges[i] = make([][2]int32, len(s.Edges))
		for j, e := range s.Edges {
			edges[i][j] = [2]int32{p.intern(e[0]), p.intern(e[1])}
		}
	}
	perm := p.renumberByName()
	for _, l := range links {
		a, okA := p.index[l.SourceGroup]
		b, okB := p.index[l.DestGroup]
		k := edgeKey(a, b)
		if _, dup := p.byEdge[k]; dup || l.Deleted || !okA || !okB {
			continue // one link per pair; links come sorted, so the choice is stable
		}
		p.byEdge[k] = int32(len(p.hops))
		p.byLink[l.ID] = int32(len(p.hops))
		p.hops = append(p.hops, hop{linkID: l.ID, srcGroup: a, dstGrp: b, srcNode: l.SourceNodeID, dstNode: l.DestNodeID})
	}
	for i, s := range segs {
		if g := p.graph(s.Name, edges[i], perm); g != nil {
			p.graphs = append(p.graphs, g)
		}
	}
	return p
}

// update brings the view in line with one link's change (nil: not live, before or
// after) and reports whether it could: a change of a hop's ends is made in place,
// and a change that leaves every pair with the hop it had changes nothing; anything
// else (a pair gains or loses its hop) needs a new view.
func (p *linked) update(old, cur *store.Link) bool {
	if old != nil && cur != nil && (old.SourceGroup != cur.SourceGroup || old.DestGroup != cur.DestGroup) {
		return false
	}
	l := cur
	if l == nil {
		l = old
	}
	if l == nil {
		return true
	}
	if hi, ok := p.byLink[l.ID]; ok {
		if cur == nil {
			return false // the pair loses its hop; another link may take its place
		}
		p.hops[hi].srcNode, p.hops[hi].dstNode = cur.SourceNodeID, cur.DestNodeID
		return true
	}
	if cur == nil {
		return true
	}
	a, okA := p.index[cur.SourceGroup]
	b, okB := p.index[cur.DestGroup]
	if !okA || !okB {
		return true // outside every segment: no graph uses it
	}
	hi, has := p.byEdge[edgeKey(a, b)]
	// The pair keeps its hop if that link sorts first; otherwise this one takes over.
	return has && p.hops[hi].linkID < cur.ID
}

func (p *linked) intern(g string) int32 {
	i, ok := p.index[g]
	if !ok {
		i = int32(len(p.groups))
		p.index[g] = i
		p.groups = append(p.groups, g)
	}
	return i
}

// renumberByName makes index order name order and returns old index -> new index.
func (p *linked) renumberByName() []int32 {
	old := slices.Clone(p.groups)
	slices.Sort(p.groups)
	for i, g := range p.groups {
		p.index[g] = int32(i)
	}
	perm := make([]int32, len(old))
	for i, g := range old {
		perm[i] = p.index[g]
	}
	return perm
}

// graph builds one segment's compressed adjacency from its linked edges, or nil.
func (p *linked) graph(name string, edges [][2]int32, perm []int32) *graph {
	n := len(p.groups)
	g := &graph{segment: name, start: make([]int32, n+1), trees: map[int32]*tree{}}
	kept := edges[:0:0]
	for _, e := range edges {
		a, b := perm[e[0]], perm[e[1]]
		if _, linked := p.byEdge[edgeKey(a, b)]; linked {
			kept = append(kept, [2]int32{a, b})
			g.start[a+1]++
			g.start[b+1]++
		}
	}
	if len(kept) == 0 {
		return nil
	}
	for v := range n {
		g.start[v+1] += g.start[v]
	}
	g.adj = make([]int32, 2*len(kept))
	fill := slices.Clone(g.start[:n])
	for _, e := range kept {
		g.adj[fill[e[0]]], g.adj[fill[e[1]]] = e[1], e[0]
		fill[e[0]]++
		fill[e[1]]++
	}
	for v := range int32(n) {
		slices.Sort(g.neighbours(v))
	}
	return g
}

// plan expands one name in every segment. In each segment, and within it each connected
// component, the tree is rooted at the group of the first announcer there. Every other
// group of that component gets an upward route on its gateway toward its parent; each
// later announcer gets downward routes on the parents along its path to the root. The
// routes of one tree use only tree edges, so they cannot loop.
func (p *planner) plan(name store.Name, anns []announcer) {
	id, np := p.names, &name
	p.names++
	for _, g := range p.graphs {
		var trees []*tree
		var down [][]bool
		for _, a := range anns {
			v, ok := p.index[a.group]
			if !ok || len(g.neighbours(v)) == 0 {
				continue
			}
			ti := slices.IndexFunc(trees, func(t *tree) bool { return t.parent[v] >= 0 })
			if ti < 0 {
				t := g.tree(v)
				trees, down = append(trees, t), append(down, make([]bool, len(t.parent)))
				p.out = slices.Grow(p.out, len(t.order))
				for _, w := range t.order[1:] {
					p.add(w, t.parent[w], id, np, a.node)
				}
				continue
			}
			// Walk up to the root, stopping at the first edge an earlier announcer
			// already covered: every edge above it is covered too.
			t, d := trees[ti], down[ti]
			for c := v; t.parent[c] != c && !d[c]; c = t.parent[c] {
				d[c] = true
				p.add(t.parent[c], c, id, np, a.node)
			}
		}
	}
}

// add records a route on from's gateway toward to, if that side of the link is known
// (the destination side only after the claim).
func (p *planner) add(from, to, nameID int32, name *store.Name, dest string) {
	hi := p.byEdge[edgeKey(from, to)]
	h := &p.hops[hi]
	if h.gateway(from) == "" {
		return
	}
	rid := routeID{name: nameID, hop: hi, srcSide: from == h.srcGroup}
	if p.seen[rid] {
		return // the same subscription serves both; the earliest announcer names it
	}
	p.seen[rid] = true
	p.out = append(p.out, desiredRoute{hop: h, srcSide: rid.srcSide, name: name, dest: dest})
}
