package controlplane

import (
	"cmp"
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
type linkView struct {
	links map[string]store.Link // nil: not loaded
	graph *linked               // nil: to be built from links
}

// atomically is store.Atomically for the service's operations: when the transaction
// fails, the link view may hold writes that were undone, so it is dropped.
func (s *Service) atomically(ctx context.Context, fn func(ctx context.Context) error) error {
	err := s.store.Atomically(ctx, fn)
	if err != nil {
		s.view = linkView{}
	}
	return err
}

// refreshLinks brings the view up to date with the links w touched and reports
// which of them changed only their ends (moved, nil, when any of them — or something
// unknown — may have changed the edges: then everything is re-planned).
func (s *Service) refreshLinks(ctx context.Context, w *work, topo *resolved) (moved []string, err error) {
	defer clear(w.touched)
	if len(w.touched) == 0 {
		if s.view.links == nil {
			return nil, s.loadLinks(ctx)
		}
		return nil, nil
	}
	if s.view.links == nil {
		// Nothing to tell an edge from an end by: plan all over.
		w.graph = true
		return nil, s.loadLinks(ctx)
	}
	// The graph of the links as they were before this operation, to update.
	g := s.linkedGraph(topo)
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
			return nil, fmt.Errorf("link %s: %w", id, err)
		case !l.Deleted:
			cur = &l
		}
		if cur != nil {
			s.view.links[id] = *cur
		} else {
			delete(s.view.links, id)
		}
		if g != nil && !g.update(old, cur) {
			g, s.view.graph = nil, nil
			w.graph = true
		}
		moved = append(moved, id)
	}
	return moved, nil
}

func (s *Service) loadLinks(ctx context.Context) error {
	links, err := s.store.ListLinks(ctx, store.LinkFilter{})
	if err != nil {
		return fmt.Errorf("list links: %w", err)
	}
	s.view = linkView{links: make(map[string]store.Link, len(links))}
	for _, l := range links {
		s.view.links[l.ID] = l
	}
	return nil
}

// linkedGraph returns the planner's view for the topology in force.
func (s *Service) linkedGraph(topo *resolved) *linked {
	if g := s.view.graph; g != nil && g.topo == topo {
		return g
	}
	links := make([]store.Link, 0, len(s.view.links))
	for _, l := range s.view.links {
		links = append(links, l)
	}
	slices.SortFunc(links, func(a, b store.Link) int { return cmp.Compare(a.ID, b.ID) })
	g := newLinked(topo.segs, links)
	g.topo = topo
	s.view.graph = g
	return g
}
