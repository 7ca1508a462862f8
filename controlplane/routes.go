package controlplane

import (
	"context"
	"errors"
	"fmt"

	"github.com/switchboard-mesh/switchboard/controlplane/store"
)

// AddWildcardRoute records that nodeID announced name (the DP subscribed without a link,
// or an operator added the route) and expands it over the SPT. Announcing again is a
// no-op; the first announcer of a name roots its tree.
func (s *Service) AddWildcardRoute(ctx context.Context, nodeID string, name store.Name) (Result, error) {
	if err := name.Validate(); err != nil {
		return Result{}, fmt.Errorf("%w: %w", ErrInvalidArgument, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	w := newWork()
	added := false
	err := s.store.Atomically(ctx, func(ctx context.Context) error {
		if _, err := s.store.GetNode(ctx, nodeID); err != nil {
			return fmt.Errorf("announce %s: %w", name, err)
		}
		_, err := s.store.CreateRoute(ctx, store.Route{
			SourceNodeID: store.AllNodes, DestNodeID: nodeID, Name: name, Status: store.RouteApplied,
		})
		if errors.Is(err, store.ErrExists) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("announce %s: %w", name, err)
		}
		added = true
		return s.expandAll(ctx, w)
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
// announcer needs are marked deleted.
func (s *Service) DeleteWildcardRoute(ctx context.Context, nodeID string, name store.Name) (Result, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	w := newWork()
	err := s.store.Atomically(ctx, func(ctx context.Context) error {
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
		return s.expandAll(ctx, w)
	})
	if err != nil {
		return Result{}, err
	}
	return w.result(), nil
}

// expandAll is the spec's expand_all_wildcard_routes, done as a diff: it computes every
// expansion the templates want now and brings the stored routes to that set. New ones
// are created Pending; ones no longer wanted are marked deleted, so the route reconciler
// unsubscribes them; a wanted one still waiting for its hard delete is replaced by a
// fresh Pending record (the node may still hold the subscription, and re-subscribing is
// idempotent).
func (s *Service) expandAll(ctx context.Context, w *work) error {
	all, err := s.store.ListRoutes(ctx, store.RouteFilter{Deleted: store.IncludeDeleted})
	if err != nil {
		return fmt.Errorf("list routes: %w", err)
	}
	names, anns := announcements(all)
	var want []desiredRoute
	if len(names) > 0 {
		if want, err = s.plan(ctx, names, anns); err != nil {
			return err
		}
	}
	return s.applyPlan(ctx, all, want, w)
}

// announcements groups the live templates by name, names and announcers in the order
// they were made (route ids increase).
func announcements(all []store.Route) ([]store.Name, map[store.Name][]announcer) {
	var names []store.Name
	anns := map[store.Name][]announcer{}
	for _, r := range all {
		if !r.IsTemplate() || r.Deleted {
			continue
		}
		if _, ok := anns[r.Name]; !ok {
			names = append(names, r.Name)
		}
		anns[r.Name] = append(anns[r.Name], announcer{node: r.DestNodeID, group: GroupOf(r.DestNodeID)})
	}
	return names, anns
}

func (s *Service) plan(ctx context.Context, names []store.Name, anns map[store.Name][]announcer) ([]desiredRoute, error) {
	segs, _, err := s.resolve(ctx)
	if err != nil {
		return nil, err
	}
	links, err := s.store.ListLinks(ctx, store.LinkFilter{})
	if err != nil {
		return nil, fmt.Errorf("list links: %w", err)
	}
	p := newPlanner(segs, links)
	for _, n := range names {
		p.plan(n, anns[n])
	}
	return p.out, nil
}

func (s *Service) applyPlan(ctx context.Context, all []store.Route, want []desiredRoute, w *work) error {
	live, deleted := map[string]store.Route{}, map[string]store.Route{}
	for _, r := range all {
		switch {
		case r.IsTemplate():
		case r.Deleted:
			deleted[r.Key()] = r
		default:
			live[r.Key()] = r
		}
	}
	for _, d := range want {
		k := d.key()
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
	for _, r := range live { // wanted no more
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
		if err := s.store.DeleteRoute(ctx, r.ID); err != nil && !errors.Is(err, store.ErrNotFound) {
			return fmt.Errorf("delete route %d: %w", r.ID, err)
		}
	}
	for _, r := range toward {
		if r.IsTemplate() {
			if err := s.store.DeleteRoute(ctx, r.ID); err != nil {
				return fmt.Errorf("delete wildcard route %d: %w", r.ID, err)
			}
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
