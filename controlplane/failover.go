package controlplane

import (
	"context"
	"errors"
	"fmt"

	"github.com/switchboard-mesh/switchboard/controlplane/store"
)

// failover is the spec's handle_links_for_departing_node. n is already marked
// disconnected. With connected siblings, its outgoing links move to a random sibling
// and its incoming links are replaced by new ones targeting the group again; without,
// every link of the group is soft-deleted.
func (s *Service) failover(ctx context.Context, n store.Node, graceful bool, w *work) error {
	if n.Group == "" {
		return nil
	}
	siblings, err := s.store.ListNodes(ctx, store.NodeFilter{Group: n.Group, ConnectedOnly: true})
	if err != nil {
		return fmt.Errorf("list siblings of %s: %w", n.ID, err)
	}
	if len(siblings) == 0 {
		return s.dropGroupLinks(ctx, n, graceful, w)
	}
	outgoing, err := s.store.ListLinks(ctx, store.LinkFilter{SourceNodeID: n.ID})
	if err != nil {
		return fmt.Errorf("list links of %s: %w", n.ID, err)
	}
	for _, l := range outgoing {
		if err := s.moveOutgoing(ctx, l, n.ID, siblings[s.pick(len(siblings))].ID, w); err != nil {
			return err
		}
	}
	incoming, err := s.incomingLinks(ctx, n.ID)
	if err != nil {
		return err
	}
	for _, l := range incoming {
		if err := s.replaceIncoming(ctx, l, n.ID, w); err != nil {
			return err
		}
	}
	return nil
}

// moveOutgoing hands a link the departing node dialled to sibling: same link id, back to
// Pending, and the node's routes over it move along.
func (s *Service) moveOutgoing(ctx context.Context, l store.Link, from, sibling string, w *work) error {
	if _, err := s.store.UpdateLink(ctx, l.ID, store.LinkUpdate{
		SourceNodeID: &sibling, Status: store.Ptr(store.LinkPending),
		StatusMessage: store.Ptr("gateway failover from " + from),
	}); err != nil {
		return fmt.Errorf("fail over link %s to %s: %w", l.ID, sibling, err)
	}
	s.log.Info("gateway failover", "link", l.ID, "from", from, "to", sibling, "direction", "outgoing")
	w.link(sibling)
	w.relinked(l.ID)
	routes, err := s.store.ListRoutes(ctx, store.RouteFilter{SourceNodeID: from, LinkID: l.ID})
	if err != nil {
		return fmt.Errorf("list routes over link %s: %w", l.ID, err)
	}
	for _, r := range routes {
		_, err := s.store.UpdateRoute(ctx, r.ID, store.RouteUpdate{
			SourceNodeID: &sibling, Status: store.Ptr(store.RoutePending), StatusMessage: store.Ptr(""),
		})
		if errors.Is(err, store.ErrExists) {
			err = s.store.DeleteRoute(ctx, r.ID) // the sibling already has this subscription
		}
		if err != nil {
			return fmt.Errorf("move route %d to %s: %w", r.ID, sibling, err)
		}
		w.route(sibling)
	}
	return nil
}

// incomingLinks are the live links that end at nodeID: claimed by it, or made to target
// it and not yet claimed by anyone.
func (s *Service) incomingLinks(ctx context.Context, nodeID string) ([]store.Link, error) {
	claimed, err := s.store.ListLinks(ctx, store.LinkFilter{DestNodeID: nodeID})
	if err != nil {
		return nil, fmt.Errorf("list links to %s: %w", nodeID, err)
	}
	targeted, err := s.store.ListLinks(ctx, store.LinkFilter{TargetNodeID: nodeID})
	if err != nil {
		return nil, fmt.Errorf("list links to %s: %w", nodeID, err)
	}
	for _, l := range targeted {
		if l.DestNodeID == "" {
			claimed = append(claimed, l)
		}
	}
	return claimed, nil
}

// replaceIncoming deletes a link whose far end departed, drops the routes over it and
// has its source link to the group again, now at a sibling.
func (s *Service) replaceIncoming(ctx context.Context, l store.Link, departing string, w *work) error {
	if _, err := store.MarkLinkDeleted(ctx, s.store, l.ID); err != nil {
		return fmt.Errorf("delete link %s: %w", l.ID, err)
	}
	s.log.Info("gateway failover", "link", l.ID, "from", departing, "direction", "incoming")
	w.link(l.SourceNodeID)
	w.relinked(l.ID)
	if err := s.dropRoutesOver(ctx, l.ID, departing, w); err != nil {
		return err
	}
	src, err := s.store.GetNode(ctx, l.SourceNodeID)
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("source of link %s: %w", l.ID, err)
	}
	return s.ensureLinks(ctx, src, w)
}

// dropRoutesOver removes the routes over a deleted link: the departing node's at once,
// the others through the reconciler.
func (s *Service) dropRoutesOver(ctx context.Context, linkID, departing string, w *work) error {
	routes, err := s.store.ListRoutes(ctx, store.RouteFilter{LinkID: linkID})
	if err != nil {
		return fmt.Errorf("list routes over link %s: %w", linkID, err)
	}
	for _, r := range routes {
		if r.SourceNodeID == departing {
			err = s.store.DeleteRoute(ctx, r.ID)
		} else {
			_, err = store.MarkRouteDeleted(ctx, s.store, r.ID)
			w.route(r.SourceNodeID)
		}
		if err != nil {
			return fmt.Errorf("drop route %d over link %s: %w", r.ID, linkID, err)
		}
	}
	return nil
}

// dropGroupLinks soft-deletes every link of the last node's group and the routes over
// them. After a graceful deregistration the links the node dialled are hard-deleted at
// once: its record goes, so no reconciler would ever visit them. The service remembers
// the links that were Applied, and their ends, for adoptLinks.
func (s *Service) dropGroupLinks(ctx context.Context, n store.Node, graceful bool, w *work) error {
	links, err := s.store.ListLinks(ctx, store.LinkFilter{Group: n.Group})
	if err != nil {
		return fmt.Errorf("list links of group %s: %w", n.Group, err)
	}
	for _, l := range links {
		w.relinked(l.ID)
		id, ends := l.ID, linkEnds{l.SourceNodeID, l.DestNodeID}
		// A node that deregistered never comes back to adopt: nothing of its
		// links is remembered (forgetDropped ran before this transaction's own
		// records would be kept).
		held := l.Status == store.LinkApplied && ends.dest != "" && !(graceful && (ends.source == n.ID || ends.dest == n.ID))
		w.onCommit(func() {
			delete(s.adopted, id)
			if held {
				s.dropped[id] = ends
			}
		})
		if _, err := store.MarkLinkDeleted(ctx, s.store, l.ID); err != nil {
			return fmt.Errorf("delete link %s: %w", l.ID, err)
		}
		if err := s.dropRoutesOver(ctx, l.ID, n.ID, w); err != nil {
			return err
		}
		if graceful && l.SourceNodeID == n.ID {
			if err := s.store.DeleteLink(ctx, l.ID); err != nil {
				return fmt.Errorf("purge link %s: %w", l.ID, err)
			}
			continue
		}
		w.link(l.SourceNodeID)
	}
	s.log.Info("last node of group left: links soft-deleted", "group", n.Group, "links", len(links))
	return nil
}
