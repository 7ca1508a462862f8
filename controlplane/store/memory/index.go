package memory

import (
	"cmp"
	"maps"
	"slices"

	"github.com/switchboard-mesh/switchboard/controlplane/store"
)

// The tables below keep, beside each record map, the indexes the control plane's
// queries go by — routes by source node, destination node, link and name; links by
// source, destination and target node and by group; nodes by group — so that a
// query costs what it returns, not what the store holds. Every change goes through
// put or remove, which keep the indexes in step and record their own undo in a
// transaction.

// index maps a key to the ids of the records under it, sorted: a list by key comes
// out in order without sorting, and route ids, which only grow, are appended.
type index[K comparable, ID cmp.Ordered] map[K][]ID

func (x index[K, ID]) add(k K, id ID) {
	ids := x[k]
	if n := len(ids); n == 0 || ids[n-1] < id {
		x[k] = append(ids, id)
		return
	}
	if i, found := slices.BinarySearch(ids, id); !found {
		x[k] = slices.Insert(ids, i, id)
	}
}

func (x index[K, ID]) remove(k K, id ID) {
	ids := x[k]
	i, found := slices.BinarySearch(ids, id)
	switch {
	case !found:
	case len(ids) == 1:
		delete(x, k)
	default:
		x[k] = slices.Delete(ids, i, i+1)
	}
}

type nodeTable struct {
	byID    map[string]store.Node
	byGroup index[string, string]
}

func newNodeTable() *nodeTable {
	return &nodeTable{byID: map[string]store.Node{}, byGroup: index[string, string]{}}
}

func (t *nodeTable) put(n store.Node) {
	if old, ok := t.byID[n.ID]; ok {
		t.byGroup.remove(old.Group, old.ID)
	}
	t.byID[n.ID] = n
	t.byGroup.add(n.Group, n.ID)
}

func (t *nodeTable) remove(id string) {
	if old, ok := t.byID[id]; ok {
		t.byGroup.remove(old.Group, id)
		delete(t.byID, id)
	}
}

func (t *linkTable) count(l store.Link, d int) {
	t.tally.Links += d
	if l.Status == store.LinkApplied && l.DestNodeID != "" && !l.Deleted {
		t.tally.LinksAppliedClaimed += d
	}
}

type linkTable struct {
	tally                      LinkTally
	byID                       map[string]store.Link
	bySource, byDest, byTarget index[string, string]
	byGroup                    index[string, string]
}

func newLinkTable() *linkTable {
	return &linkTable{byID: map[string]store.Link{}, bySource: index[string, string]{}, byDest: index[string, string]{},
		byTarget: index[string, string]{}, byGroup: index[string, string]{}}
}

func (t *linkTable) unindex(l store.Link) {
	t.bySource.remove(l.SourceNodeID, l.ID)
	t.byDest.remove(l.DestNodeID, l.ID)
	t.byTarget.remove(l.TargetNodeID, l.ID)
	t.byGroup.remove(l.SourceGroup, l.ID)
	t.byGroup.remove(l.DestGroup, l.ID)
}

func (t *linkTable) put(l store.Link) {
	if old, ok := t.byID[l.ID]; ok {
		t.count(old, -1)
		t.unindex(old)
	}
	t.count(l, 1)
	t.byID[l.ID] = l
	t.bySource.add(l.SourceNodeID, l.ID)
	t.byDest.add(l.DestNodeID, l.ID)
	t.byTarget.add(l.TargetNodeID, l.ID)
	t.byGroup.add(l.SourceGroup, l.ID)
	t.byGroup.add(l.DestGroup, l.ID)
}

func (t *linkTable) remove(id string) {
	if old, ok := t.byID[id]; ok {
		t.count(old, -1)
		t.unindex(old)
		delete(t.byID, id)
	}
}

// candidates returns the ids the filter can match, from its most selective index,
// or nil (with all true) when no field narrows it.
func (t *linkTable) candidates(f store.LinkFilter) (ids []string, all bool) {
	switch {
	case f.SourceNodeID != "":
		return t.bySource[f.SourceNodeID], false
	case f.DestNodeID != "":
		return t.byDest[f.DestNodeID], false
	case f.TargetNodeID != "":
		return t.byTarget[f.TargetNodeID], false
	case f.Group != "":
		return t.byGroup[f.Group], false
	}
	return nil, true
}

// list sorts ids, not records: a link is a dozen fields, and moving records about
// made sorting most of the cost of listing a few thousand links. Ids from an index
// come sorted.
func (t *linkTable) list(f store.LinkFilter) []store.Link {
	ids, all := t.candidates(f)
	return listed(t.byID, ids, all, f.Match)
}

// listed returns the records of ids that match, or of every id, in order, when all
// is set. It is how every table lists.
func listed[ID cmp.Ordered, R any](byID map[ID]R, ids []ID, all bool, match func(R) bool) []R {
	if all {
		ids = slices.Sorted(maps.Keys(byID))
	}
	out := make([]R, 0, len(ids))
	for _, id := range ids {
		if r := byID[id]; match(r) {
			out = append(out, r)
		}
	}
	return out
}

// routeKey is store.Route.Key as a comparable value: building the string for each
// of a million routes written is most of what writing them costs.
type routeKey struct {
	source, link, dest string
	name               store.Name
}

func keyOf(r store.Route) routeKey {
	if r.IsTemplate() { // one announcement per node and name
		return routeKey{source: store.AllNodes, dest: r.DestNodeID, name: r.Name}
	}
	return routeKey{source: r.SourceNodeID, link: r.LinkID, name: r.Name}
}

// sameIndexKeys reports whether a and b sit under the same keys of every route index
// (and so have the same Key).
func sameIndexKeys(a, b store.Route) bool {
	return a.SourceNodeID == b.SourceNodeID && a.DestNodeID == b.DestNodeID && a.LinkID == b.LinkID && a.Name == b.Name
}

// count adds d to the tallies r falls under.
func (t *routeTable) count(r store.Route, d int) {
	switch {
	case r.IsTemplate():
		if !r.Deleted {
			t.tally.Templates += d
		}
	default:
		t.tally.Expansions += d
		if r.Status == store.RouteApplied && !r.Deleted {
			t.tally.ExpansionsApplied += d
		}
	}
}

type routeTable struct {
	tally                    RouteTally
	byID                     map[int64]store.Route
	byKey                    map[routeKey]int64
	bySource, byDest, byLink index[string, int64]
	byName                   index[store.Name, int64]
	nextID                   int64
}

func newRouteTable() *routeTable {
	return &routeTable{byID: map[int64]store.Route{}, byKey: map[routeKey]int64{}, bySource: index[string, int64]{},
		byDest: index[string, int64]{}, byLink: index[string, int64]{}, byName: index[store.Name, int64]{}}
}

func (t *routeTable) unindex(r store.Route) {
	delete(t.byKey, keyOf(r))
	t.bySource.remove(r.SourceNodeID, r.ID)
	t.byDest.remove(r.DestNodeID, r.ID)
	t.byLink.remove(r.LinkID, r.ID)
	t.byName.remove(r.Name, r.ID)
}

func (t *routeTable) put(r store.Route) {
	if old, ok := t.byID[r.ID]; ok {
		t.count(old, -1)
		t.count(r, 1)
		if sameIndexKeys(old, r) {
			// A status change, the reconcilers' everyday write: every index stays.
			t.byID[r.ID] = r
			return
		}
		t.unindex(old)
	} else {
		t.count(r, 1)
	}
	t.byID[r.ID] = r
	t.byKey[keyOf(r)] = r.ID
	t.bySource.add(r.SourceNodeID, r.ID)
	t.byDest.add(r.DestNodeID, r.ID)
	t.byLink.add(r.LinkID, r.ID)
	t.byName.add(r.Name, r.ID)
}

func (t *routeTable) remove(id int64) {
	if old, ok := t.byID[id]; ok {
		t.count(old, -1)
		t.unindex(old)
		delete(t.byID, id)
	}
}

// candidates is linkTable.candidates for routes; of several fields set, the smallest
// set wins (templates share one source, "*").
func (t *routeTable) candidates(f store.RouteFilter) (ids []int64, all bool) {
	all = true
	pick := func(set []int64) {
		if all || len(set) < len(ids) {
			ids, all = set, false
		}
	}
	if f.SourceNodeID != "" {
		pick(t.bySource[f.SourceNodeID])
	}
	if f.LinkID != "" {
		pick(t.byLink[f.LinkID])
	}
	if f.Name != nil {
		pick(t.byName[*f.Name])
	}
	if f.DestNodeID != "" {
		pick(t.byDest[f.DestNodeID])
	}
	return ids, all
}

// list is linkTable.list for routes.
func (t *routeTable) list(f store.RouteFilter) []store.Route {
	ids, all := t.candidates(f)
	return listed(t.byID, ids, all, f.Match)
}

// RouteTally counts routes without listing them.
type RouteTally struct {
	Templates         int // live templates
	Expansions        int // expansions, deleted or not
	ExpansionsApplied int // live expansions that are Applied
}

// LinkTally counts links without listing them.
type LinkTally struct {
	Links               int // deleted or not
	LinksAppliedClaimed int // live, Applied and claimed
}

// Tally returns the counts of links and routes by state, kept as records change:
// what a dashboard or a benchmark watching a million routes converge needs, at no
// cost to the store.
func (s *Store) Tally() (LinkTally, RouteTally) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.links.tally, s.routes.tally
}
