package controlplane

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/switchboard-mesh/switchboard/controlplane/store"
)

// AddWildcardRoute records that nodeID announced name (the DP subscribed without a link,
// or an operator added the route) and expands it over the SPT. Announcing again is a
// no-op; the first announcer of a name roots its tree. Only this name is re-planned,
// and not even that when a node of the same group announced it before: the trees
// already reach that group (as root, or on its path up), so a second announcer there
// adds no route.
func (s *Service) AddWildcardRoute(ctx context.Context, nodeID string, name store.Name) (Result, error) {
	if err := name.Validate(); err != nil {
		return Result{}, fmt.Errorf("%w: %w", ErrInvalidArgument, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	w := newWork()
	added := false
	err := s.atomically(ctx, func(ctx context.Context) error {
		if _, err := s.store.GetNode(ctx, nodeID); err != nil {
			return fmt.Errorf("announce %s: %w", name, err)
		}
		anns, err := s.announcementView(ctx)
		if err != nil {
			return err
		}
		covered := false
		for _, t := range anns[name] {
			if t.node == nodeID {
				return nil
			}
			covered = covered || GroupOf(t.node) == GroupOf(nodeID)
		}
		tpl, err := s.store.CreateRoute(ctx, store.Route{
			SourceNodeID: store.AllNodes, DestNodeID: nodeID, Name: name, Status: store.RouteApplied,
		})
		if errors.Is(err, store.ErrExists) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("announce %s: %w", name, err)
		}
		s.announced(tpl)
		added = true
		if covered {
			return nil
		}
		w.name(name)
		return s.replan(ctx, w)
	})
	if err != nil {
		return Result{}, err
	}
	if added {
		s.log.Info("wildcard route added", "name", name.String(), "node", nodeID)
	}
	return w.result(), nil
}

// DeleteWildcardRoute withdraws nodeID's announcement of name; expansions no other
// announcer needs are marked deleted. Only this name is re-planned.
func (s *Service) DeleteWildcardRoute(ctx context.Context, nodeID string, name store.Name) (Result, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	w := newWork()
	err := s.atomically(ctx, func(ctx context.Context) error {
		tpls, err := s.store.ListRoutes(ctx, store.RouteFilter{SourceNodeID: store.AllNodes, DestNodeID: nodeID, Name: &name})
		if err != nil {
			return fmt.Errorf("withdraw %s: %w", name, err)
		}
		if len(tpls) == 0 {
			return store.NotFound("wildcard route", name.String()+" of "+nodeID)
		}
		if err := s.store.DeleteRoute(ctx, tpls[0].ID); err != nil {
			return fmt.Errorf("withdraw %s: %w", name, err)
		}
		s.withdrawn(tpls[0])
		w.name(name)
		return s.replan(ctx, w)
	})
	if err != nil {
		return Result{}, err
	}
	return w.result(), nil
}

// expandAll re-plans every name from the store alone, whatever changed: the link view
// is read afresh, so that a plan made incrementally can be checked against it.
func (s *Service) expandAll(ctx context.Context, w *work) error {
	s.view = linkView{}
	w.graph = true
	return s.replan(ctx, w)
}

// scope is what a re-plan looks at: every route, or the routes of some names and
// the routes over some links.
type scope struct {
	all   bool
	names []store.Name
	links []string
}

// replan is the spec's expand_all_wildcard_routes, limited to what the operation
// touched: the names whose announcements changed, the links whose ends changed (a
// claim, a failover: the trees stay, only who holds each side of that link does), or
// everything when a group pair gained or lost its link (a new edge can reshape every
// tree). Nothing else can move a plan: the trees depend on the segments' linked
// edges and on the announcements, the routes on them and on the links' ends, and
// every change to any of those goes through here.
func (s *Service) replan(ctx context.Context, w *work) error {
	topo, err := s.topoNow(ctx)
	if err != nil {
		return err
	}
	if err := s.refreshLinks(ctx, w, topo); err != nil {
		return err
	}
	moved := slices.Compact(slices.Sorted(slices.Values(w.moved)))
	if w.graph {
		return s.expand(ctx, topo, scope{all: true}, w)
	}
	if len(w.names) == 0 && len(moved) == 0 {
		return nil
	}
	sc := scope{links: moved, names: make([]store.Name, 0, len(w.names))}
	for n := range w.names {
		sc.names = append(sc.names, n)
	}
	slices.SortFunc(sc.names, func(a, b store.Name) int { return strings.Compare(a.String(), b.String()) })
	return s.expand(ctx, topo, sc, w)
}

// expand is done as a diff: it computes every expansion in scope the templates want
// now and brings the stored routes in scope to that set. New ones are created
// Pending; ones no longer wanted are marked deleted, so the route reconciler
// unsubscribes them; a wanted one still waiting for its hard delete is replaced by a
// fresh Pending record (the node may still hold the subscription, and re-subscribing
// is idempotent).
func (s *Service) expand(ctx context.Context, topo *resolved, sc scope, w *work) error {
	var existing []store.Route
	seen := map[int64]bool{}
	list := func(f store.RouteFilter) error {
		f.Deleted, f.ExpansionsOnly = store.IncludeDeleted, true
		rs, err := s.store.ListRoutes(ctx, f)
		if err != nil {
			return fmt.Errorf("list routes: %w", err)
		}
		for _, r := range rs {
			if !r.IsTemplate() && !seen[r.ID] {
				seen[r.ID] = true
				existing = append(existing, r)
			}
		}
		return nil
	}
	all, err := s.announcementView(ctx)
	if err != nil {
		return err
	}
	var (
		names   []store.Name
		inScope func(d desiredRoute) bool
	)
	if sc.all || len(sc.links) > 0 { // every name may want a route over the links
		for n := range all {
			names = append(names, n)
		}
	}
	if sc.all {
		if err := list(store.RouteFilter{}); err != nil {
			return err
		}
	} else {
		inNames := map[store.Name]bool{}
		for _, n := range sc.names {
			inNames[n] = true
			if err := list(store.RouteFilter{Name: &n}); err != nil {
				return err
			}
			if len(sc.links) == 0 && len(all[n]) > 0 {
				names = append(names, n)
			}
		}
		inLinks := map[string]bool{}
		for _, id := range sc.links {
			inLinks[id] = true
			if err := list(store.RouteFilter{LinkID: id}); err != nil {
				return err
			}
		}
		inScope = func(d desiredRoute) bool { return inNames[*d.name] || inLinks[d.hop.linkID] }
	}
	// Names in the order they were first announced, as a plan of every name has them.
	slices.SortFunc(names, func(a, b store.Name) int { return cmp.Compare(all[a][0].id, all[b][0].id) })
	var want []desiredRoute
	if len(names) > 0 {
		p := s.linkedGraph(topo).planner()
		for _, n := range names {
			anns := make([]announcer, len(all[n]))
			for i, t := range all[n] {
				anns[i] = announcer{node: t.node, group: GroupOf(t.node)}
			}
			p.plan(n, anns)
		}
		want = p.out
	}
	if inScope != nil {
		want = slices.DeleteFunc(want, func(d desiredRoute) bool { return !inScope(d) })
	}
	return s.applyPlan(ctx, existing, want, w)
}

// applyPlan writes the difference between the expansions of the planned names
// (existing, deleted ones included) and want.
func (s *Service) applyPlan(ctx context.Context, existing []store.Route, want []desiredRoute, w *work) error {
	live := make(map[routeKey]store.Route, len(existing))
	deleted := map[routeKey]store.Route{}
	for _, r := range existing {
		k := routeKey{source: r.SourceNodeID, link: r.LinkID, name: r.Name}
		if r.Deleted {
			deleted[k] = r
		} else {
			live[k] = r
		}
	}
	for _, d := range want {
		k := d.rkey()
		if r, ok := live[k]; ok {
			delete(live, k)
			if r.DestNodeID != d.dest {
				if _, err := s.store.UpdateRoute(ctx, r.ID, store.RouteUpdate{DestNodeID: store.Ptr(d.dest)}); err != nil {
					return fmt.Errorf("retarget route %d: %w", r.ID, err)
				}
			}
			continue
		}
		if r, ok := deleted[k]; ok {
			if err := s.store.DeleteRoute(ctx, r.ID); err != nil && !errors.Is(err, store.ErrNotFound) {
				return fmt.Errorf("replace deleted route %d: %w", r.ID, err)
			}
		}
		if _, err := s.store.CreateRoute(ctx, store.Route{
			SourceNodeID: d.source(), DestNodeID: d.dest, LinkID: d.linkID(), Name: *d.name, Status: store.RoutePending,
		}); err != nil {
			return fmt.Errorf("create route %s on %s: %w", d.name, d.source(), err)
		}
		w.route(d.source())
	}
	// Wanted no more; in id order, so that the same plan makes the same writes.
	gone := make([]store.Route, 0, len(live))
	for _, r := range live {
		gone = append(gone, r)
	}
	slices.SortFunc(gone, func(a, b store.Route) int { return cmp.Compare(a.ID, b.ID) })
	for _, r := range gone {
		if _, err := store.MarkRouteDeleted(ctx, s.store, r.ID); err != nil {
			return fmt.Errorf("mark route %d deleted: %w", r.ID, err)
		}
		w.route(r.SourceNodeID)
	}
	return nil
}

// cleanupRoutes is the spec's cleanup_routes_for_node: the departing node's own routes
// are hard-deleted (nothing is left to unsubscribe), routes leading to it are marked
// deleted so their nodes unsubscribe, and its announcements are withdrawn.
func (s *Service) cleanupRoutes(ctx context.Context, nodeID string, w *work) error {
	own, err := s.store.ListRoutes(ctx, store.RouteFilter{SourceNodeID: nodeID, Deleted: store.IncludeDeleted})
	if err != nil {
		return fmt.Errorf("list routes of %s: %w", nodeID, err)
	}
	toward, err := s.store.ListRoutes(ctx, store.RouteFilter{DestNodeID: nodeID})
	if err != nil {
		return fmt.Errorf("list routes to %s: %w", nodeID, err)
	}
	for _, r := range own {
		w.name(r.Name)
		if err := s.store.DeleteRoute(ctx, r.ID); err != nil && !errors.Is(err, store.ErrNotFound) {
			return fmt.Errorf("delete route %d: %w", r.ID, err)
		}
	}
	for _, r := range toward {
		w.name(r.Name) // its announcer leaves: the trees may hang off another one now
		if r.IsTemplate() {
			if err := s.store.DeleteRoute(ctx, r.ID); err != nil {
				return fmt.Errorf("delete wildcard route %d: %w", r.ID, err)
			}
			s.withdrawn(r)
			continue
		}
		if r.SourceNodeID == nodeID {
			continue // already gone with the node's own routes
		}
		if _, err := store.MarkRouteDeleted(ctx, s.store, r.ID); err != nil {
			return fmt.Errorf("mark route %d deleted: %w", r.ID, err)
		}
		w.route(r.SourceNodeID)
	}
	return nil
}
