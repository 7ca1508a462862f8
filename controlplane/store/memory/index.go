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
		if n == cap(ids) && n >= 256 {
			// Doubled, where append would add a quarter: a key with thousands of
			// routes would be copied over twenty times.
			ids = slices.Grow(ids, n)
		}
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
