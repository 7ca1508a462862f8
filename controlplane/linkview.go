package controlplane

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/switchboard-mesh/switchboard/controlplane/store"
)

// linkView is the service's copy of the live links and the planner's graph of them.
// Planning used to list every link and rebuild the graph for every event; with a
// full mesh of a hundred groups that is 4,950 links read, sorted and indexed for
// each of thousands of claims. Only the service changes what the planner reads of a
// link (its groups, ends and deletion — the reconcilers change status, and hard-delete
// links already marked deleted), so the copy stays true if every such write of the
// service is re-read: work.touched lists them, and replan reads them back before it
// plans. A transaction that fails drops the copy, which is then read afresh.
//
// The announcements (templates) and the registered groups are kept the same way, for
// the same reason: only the service writes them, and reading a thousand announcements
// of one name, or the distinct groups of a thousand nodes, for every event is most of
// what an event costs on SQLite.
type linkView struct {
	links   map[string]store.Link // nil: not loaded
	byGroup map[string]map[string]bool
	graph   *linked // nil: to be built from links
	anns    map[store.Name][]tplRef
	groups  []string // sorted; nil: not loaded
	// dirty says the operation in progress changed or loaded part of the view
	// (what it loads may include its own writes); if its transaction fails, the view
	// goes with it. A refused operation (a stale claim) that touched none keeps it.
	dirty bool
}

// tplRef is one announcement: a template's id and the node that made it.
type tplRef struct {
	id   int64
	node string
}

// announcements returns the live templates by name, loading them once.
func (s *Service) announcementView(ctx context.Context) (map[store.Name][]tplRef, error) {
	if s.view.anns != nil {
		return s.view.anns, nil
	}
	tpls, err := s.store.ListRoutes(ctx, store.RouteFilter{SourceNodeID: store.AllNodes})
	if err != nil {
		return nil, fmt.Errorf("list wildcard routes: %w", err)
	}
	anns := map[store.Name][]tplRef{}
	for _, t := range tpls { // in id order
		anns[t.Name] = append(anns[t.Name], tplRef{id: t.ID, node: t.DestNodeID})
	}
	s.view.anns, s.view.dirty = anns, true
	return anns, nil
}

// announced records a template the service created.
func (s *Service) announced(t store.Route) {
	if s.view.anns != nil {
		s.view.dirty = true
		s.view.anns[t.Name] = append(s.view.anns[t.Name], tplRef{id: t.ID, node: t.DestNodeID})
	}
}

// withdrawn records a template the service deleted.
func (s *Service) withdrawn(t store.Route) {
	if s.view.anns == nil {
		return
	}
	s.view.dirty = true
	refs := slices.DeleteFunc(s.view.anns[t.Name], func(r tplRef) bool { return r.id == t.ID })
	if len(refs) == 0 {
		delete(s.view.anns, t.Name)
	} else {
		s.view.anns[t.Name] = refs
	}
}

// groupView returns the registered groups, sorted, loading them once.
func (s *Service) groupView(ctx context.Context) ([]string, error) {
	if s.view.groups != nil {
		return s.view.groups, nil
	}
	groups, err := s.store.ListGroups(ctx)
	if err != nil {
		return nil, fmt.Errorf("list groups: %w", err)
	}
	s.view.groups, s.view.dirty = groups, true
	return groups, nil
}

// groupJoined records that a node of group g was saved.
func (s *Service) groupJoined(g string) {
	if s.view.groups == nil || g == "" {
		return
	}
	if i, found := slices.BinarySearch(s.view.groups, g); !found {
		s.view.dirty = true
		s.view.groups = slices.Insert(slices.Clone(s.view.groups), i, g)
	}
}

// groupLeft records that a node of group g was deleted: the group goes when it was
// the last.
func (s *Service) groupLeft(ctx context.Context, g string) error {
	if s.view.groups == nil || g == "" {
		return nil
	}
	left, err := s.store.ListNodes(ctx, store.NodeFilter{Group: g})
	if err != nil {
		return fmt.Errorf("list nodes of group %s: %w", g, err)
	}
	if i, found := slices.BinarySearch(s.view.groups, g); found && len(left) == 0 {
		s.view.dirty = true
		s.view.groups = slices.Delete(slices.Clone(s.view.groups), i, i+1)
	}
	return nil
}

// atomically is store.Atomically for the service's operations: when the transaction
// fails, the link view may hold writes that were undone, so it is dropped.
func (s *Service) atomically(ctx context.Context, fn func(ctx context.Context) error) error {
	s.view.dirty = false
	err := s.store.Atomically(ctx, fn)
	if err != nil && s.view.dirty {
		s.view = linkView{}
	}
	return err
}

// refreshLinks brings the view up to date with the links w touched, and adds those
// that changed only their ends to w.moved (when any of them — or something unknown —
// may have changed the edges, w.graph: everything is re-planned).
func (s *Service) refreshLinks(ctx context.Context, w *work, topo *resolved) error {
	defer clear(w.touched)
	if len(w.touched) == 0 {
		if s.view.links == nil {
			return s.loadLinks(ctx)
		}
		return nil
	}
	if s.view.links == nil {
		// Nothing to tell an edge from an end by: plan all over.
		w.graph = true
		return s.loadLinks(ctx)
	}
	// The graph of the links as they were before this operation, to update. Without
	// one (nothing planned yet, or an edge changed earlier in this operation) there is
	// nothing to tell an edge from an end by, and the plan is made anew — once, by
	// replan, not for every link touched.
	g := s.view.graph
	if g != nil && g.topo != topo {
		g, s.view.graph = nil, nil
	}
	if g == nil {
		w.graph = true
	}
	for _, id := range sortedKeys(w.touched) {
		var old, cur *store.Link
		if l, ok := s.view.links[id]; ok {
			old = &l
		}
		l, err := s.store.GetLink(ctx, id)
		switch {
		case errors.Is(err, store.ErrNotFound):
		case err != nil:
			s.view = linkView{}
			return fmt.Errorf("link %s: %w", id, err)
		case !l.Deleted:
			cur = &l
		}
		s.view.put(id, old, cur)
		if g != nil && !g.update(old, cur) {
			g, s.view.graph = nil, nil
			w.graph = true
		}
		w.moved = append(w.moved, id)
	}
	return nil
}

// liveLinksOf returns the live links of group g from the view, brought up to date
// first, sorted by id.
func (s *Service) liveLinksOf(ctx context.Context, w *work, topo *resolved, g string) ([]store.Link, error) {
	if err := s.refreshLinks(ctx, w, topo); err != nil {
		return nil, err
	}
	ids := make([]string, 0, len(s.view.byGroup[g]))
	for id := range s.view.byGroup[g] {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	out := make([]store.Link, len(ids))
	for i, id := range ids {
		out[i] = s.view.links[id]
	}
	return out, nil
}

func (s *Service) loadLinks(ctx context.Context) error {
	links, err := s.store.ListLinks(ctx, store.LinkFilter{})
	if err != nil {
		return fmt.Errorf("list links: %w", err)
	}
	s.view.links, s.view.graph, s.view.dirty = make(map[string]store.Link, len(links)), nil, true
	s.view.byGroup = map[string]map[string]bool{}
	for _, l := range links {
		s.view.put(l.ID, nil, &l)
	}
	return nil
}

// put replaces link id, old before (nil: absent), with cur (nil: not live).
func (v *linkView) put(id string, old, cur *store.Link) {
	v.dirty = true
	if old != nil {
		delete(v.byGroup[old.SourceGroup], id)
		delete(v.byGroup[old.DestGroup], id)
	}
	if cur == nil {
		delete(v.links, id)
		return
	}
	v.links[id] = *cur
	for _, g := range []string{cur.SourceGroup, cur.DestGroup} {
		if v.byGroup[g] == nil {
			v.byGroup[g] = map[string]bool{}
		}
		v.byGroup[g][id] = true
	}
}

// linkedGraph returns the planner's view for the topology in force.
func (s *Service) linkedGraph(topo *resolved) *linked {
	if g := s.view.graph; g != nil && g.topo == topo {
		return g
	}
	ids := make([]string, 0, len(s.view.links))
	for id := range s.view.links {
		ids = append(ids, id)
	}
	slices.Sort(ids) // ids, not records: a link is a dozen fields to move about
	links := make([]store.Link, len(ids))
	for i, id := range ids {
		links[i] = s.view.links[id]
	}
	g := newLinked(topo.segs, links)
	g.topo = topo
	s.view.graph = g
	return g
}
