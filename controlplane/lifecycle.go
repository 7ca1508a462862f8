package controlplane

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"

	"github.com/switchboard-mesh/switchboard/controlplane/config"
	"github.com/switchboard-mesh/switchboard/controlplane/store"
)

// Registration is what a node says when it registers.
type Registration struct {
	// NodeID is the node's own id; the effective id is NodeID(Group, NodeID).
	NodeID      string
	Group       string
	ConnDetails []store.ConnectionDetails
	// Connections are the links the data plane reports, for the link state sync.
	Connections []ConnectionReport
}

// ConnectionReport is one link the data plane knows: Alive says whether its connection
// is up. A link the node does not mention is "not reported".
type ConnectionReport struct {
	LinkID string
	Alive  bool
}

// Registered is the outcome of NodeRegistered.
type Registered struct {
	Result
	// NodeID is the effective id ("{group}/{node_id}").
	NodeID string
	// Session identifies this registration; pass it to NodeDeregistered and
	// NodeDisconnected so that the end of an old stream cannot remove a new one.
	Session uint64
}

var nodeIDRE = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9._:-]*$`)

func (r Registration) validate() error {
	if len(r.NodeID) > config.MaxNameLen || !nodeIDRE.MatchString(r.NodeID) {
		return fmt.Errorf("%w: node id %q (letters, digits, '.', '_', ':', '-')", ErrInvalidArgument, r.NodeID)
	}
	if r.Group != "" {
		if err := config.ValidGroupName(r.Group); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalidArgument, err)
		}
	}
	for i, cd := range r.ConnDetails {
		if cd.Endpoint == "" {
			return fmt.Errorf("%w: connection details %d has no endpoint", ErrInvalidArgument, i)
		}
	}
	return nil
}

// NodeRegistered saves the node as connected and runs the spec's node_registered: link
// state sync against the reported connections, ensure_links_for_node, and the wildcard
// expansion. The node itself is always in both reconcile sets.
func (s *Service) NodeRegistered(ctx context.Context, reg Registration) (Registered, error) {
	if err := reg.validate(); err != nil {
		return Registered{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	id := NodeID(reg.Group, reg.NodeID)
	var (
		n         store.Node
		reconnect bool
		w         *work
	)
	err := s.atomically(ctx, func(ctx context.Context) error {
		prev, err := s.store.GetNode(ctx, id)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return fmt.Errorf("register %s: %w", id, err)
		}
		reconnect = err == nil
		n = store.Node{ID: id, Group: reg.Group, ConnDetails: reg.ConnDetails, Connected: true, Session: prev.Session + 1}
		if err := s.store.SaveNode(ctx, n); err != nil {
			return fmt.Errorf("register %s: %w", id, err)
		}
		if _, err := s.groupView(ctx); err != nil {
			return err
		}
		s.groupJoined(n.Group)
		w = newWork()
		w.link(id)
		w.route(id)
		if err := s.adoptLinks(ctx, n, reg.Connections, w); err != nil {
			return err
		}
		if err := s.syncLinks(ctx, n, reg.Connections, w); err != nil {
			return err
		}
		if err := s.failoverAway(ctx, n, w); err != nil {
			return err
		}
		if err := s.ensureLinks(ctx, n, w); err != nil {
			return err
		}
		return s.replan(ctx, w)
	})
	if err != nil {
		return Registered{}, err
	}
	s.log.Info("node registered", "node", id, "session", n.Session, "reconnect", reconnect)
	return Registered{Result: w.result(), NodeID: id, Session: n.Session}, nil
}

// syncLinks reconciles the stored links that involve n with what the node reported:
//   - the link targets n and n's external endpoint changed: update endpoint and client
//     configuration and reset to Pending (mark deleted if n lost its external endpoint);
//   - reported alive: Applied (a link n received is claimed by it), route reconcile only;
//   - not reported but Applied: trusted, so a CP stream reconnect recreates nothing;
//   - reported dead, or not reported and not Applied: reset to Pending, link reconcile.
func (s *Service) syncLinks(ctx context.Context, n store.Node, reports []ConnectionReport, w *work) error {
	links, err := s.linksOf(ctx, n.ID)
	if err != nil {
		return err
	}
	alive := map[string]bool{}
	for _, r := range reports {
		alive[r.LinkID] = r.Alive
	}
	ext := n.ExternalEndpoint()
	for _, l := range links {
		up, said := alive[l.ID]
		var u store.LinkUpdate
		switch {
		case l.TargetNodeID == n.ID && l.DestEndpoint != ext && ext == "":
			u.Status = store.Ptr(store.LinkDeleted)
			w.link(l.SourceNodeID)
			w.relinked(l.ID)
		case l.TargetNodeID == n.ID && l.DestEndpoint != ext:
			u = store.LinkUpdate{DestEndpoint: &ext, ConnConfig: store.Ptr(s.clientConfig(l.ID, n, segmentsIn(l.ConnConfig))),
				Status: store.Ptr(store.LinkPending), StatusMessage: store.Ptr("destination endpoint changed")}
			w.link(l.SourceNodeID)
		case said && up:
			if l.Status != store.LinkApplied {
				u.Status = store.Ptr(store.LinkApplied)
			}
			if l.DestNodeID == "" && l.SourceNodeID != n.ID && l.DestGroup == n.Group {
				u.DestNodeID = &n.ID
				w.relinked(l.ID)
			}
			w.route(n.ID)
		case !said && l.Status == store.LinkApplied:
			continue
		default:
			if l.Status != store.LinkPending {
				u.Status = store.Ptr(store.LinkPending)
			}
			w.link(l.SourceNodeID)
		}
		if u == (store.LinkUpdate{}) {
			continue
		}
		if _, err := s.store.UpdateLink(ctx, l.ID, u); err != nil {
			return fmt.Errorf("sync link %s of %s: %w", l.ID, n.ID, err)
		}
	}
	return nil
}

// adoptLinks takes back the links n reports alive that this control plane marked
// deleted while both their ends were cut off from it. When the last node of a group
// leaves without deregistering, its links are soft-deleted (failover.go); but when
// only the control-plane paths broke — a partition, not a crash — both nodes keep the
// link and forward over it, and on the heal they register again naming it. The first
// of them to come back adopts it: same id, no teardown, and the routes the
// reconcilers would otherwise remove stay on the nodes. Only a link n still holds is
// taken back, and only when that is provably the same link as before:
//   - it is a record of this incarnation: a restarted control plane clears links, so a
//     claim of an id it did not issue finds no record and is refused as before;
//   - n is one of its ends — its source, or the node that claimed it — and the other
//     end is a node whose record is kept (it left without deregistering) and is
//     still disconnected: n's live connection is the other end's too, and that end
//     confirms it when it comes back (syncLinks). An end that is connected again did
//     not name the link when it registered, and may be deleting it: no adoption;
//   - the topology still links the two groups, in the same segments, the target
//     still has the endpoint dialled, and no other live link joins the groups.
//
// Otherwise the link stays deleted and the groups are linked anew, as before. The
// store never takes a record out of Deleted, so the link is hard-deleted and created
// again under its id, within the registration's transaction. The new record is at
// version 2 once Applied: a reconciler pass still holding the deleted one (version 3
// or more: made, claimed, deleted) finds it changed, and its DeleteLinkIf fails.
func (s *Service) adoptLinks(ctx context.Context, n store.Node, reports []ConnectionReport, w *work) error {
	if n.Group == "" {
		return nil
	}
	for _, r := range reports {
		if !r.Alive {
			continue
		}
		l, err := s.store.GetLink(ctx, r.LinkID)
		if errors.Is(err, store.ErrNotFound) {
			continue // not issued by this incarnation, or gone for good
		}
		if err != nil {
			return fmt.Errorf("adopt link %s of %s: %w", r.LinkID, n.ID, err)
		}
		if !l.Deleted {
			continue
		}
		ok, err := s.adoptable(ctx, n, l, w)
		if err != nil {
			return err
		}
		if !ok {
			continue
		}
		if err := s.store.DeleteLink(ctx, l.ID); err != nil {
			return fmt.Errorf("adopt link %s of %s: %w", l.ID, n.ID, err)
		}
		back := l
		back.Status, back.Deleted, back.StatusMessage = store.LinkPending, false, ""
		if err := s.store.CreateLink(ctx, back); err != nil {
			return fmt.Errorf("adopt link %s of %s: %w", l.ID, n.ID, err)
		}
		if _, err := s.store.UpdateLink(ctx, l.ID, store.LinkUpdate{
			Status: store.Ptr(store.LinkApplied), StatusMessage: store.Ptr(store.LinkAdopted),
		}); err != nil {
			return fmt.Errorf("adopt link %s of %s: %w", l.ID, n.ID, err)
		}
		s.log.Info("link adopted", "link", l.ID, "node", n.ID, "source", l.SourceNodeID, "dest", l.DestNodeID)
		w.relinked(l.ID)
		w.link(l.SourceNodeID)
		w.route(l.SourceNodeID)
		w.route(l.DestNodeID)
	}
	return nil
}

// adoptable checks the conditions of adoptLinks for the deleted link l that n reports
// alive.
func (s *Service) adoptable(ctx context.Context, n store.Node, l store.Link, w *work) (bool, error) {
	var other string
	switch {
	case l.DestNodeID == "":
		return false, nil // never claimed: nothing says who held the other end
	case l.SourceNodeID == n.ID:
		other = l.DestNodeID
	case l.DestNodeID == n.ID:
		other = l.SourceNodeID
	default:
		return false, nil
	}
	o, err := s.store.GetNode(ctx, other)
	if errors.Is(err, store.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("adopt link %s: %w", l.ID, err)
	}
	if o.Connected {
		return false, nil
	}
	target := n
	if l.TargetNodeID != n.ID {
		if target, err = s.store.GetNode(ctx, l.TargetNodeID); errors.Is(err, store.ErrNotFound) {
			return false, nil
		} else if err != nil {
			return false, fmt.Errorf("adopt link %s: %w", l.ID, err)
		}
	}
	if target.ExternalEndpoint() != l.DestEndpoint {
		return false, nil
	}
	topo, err := s.topoNow(ctx)
	if err != nil {
		return false, err
	}
	segs := topo.segmentsOf(l.SourceGroup, l.DestGroup)
	if len(segs) == 0 || !slices.Equal(segs, segmentsIn(l.ConnConfig)) {
		return false, nil
	}
	live, err := s.liveLinksOf(ctx, w, topo, n.Group)
	if err != nil {
		return false, err
	}
	peer := l.Peer(n.Group)
	for _, x := range live {
		if x.Peer(n.Group) == peer {
			return false, nil
		}
	}
	return true, nil
}

// failoverAway fails over the disconnected nodes of n's group that are still an end
// of a live link. Departures move or delete every link of a node that leaves, so only
// a link adopted from its other end (adoptLinks) has such an end: one still cut off
// from the control plane — or gone for good, which the control plane cannot tell. A
// sibling registering takes over from it as the departure would have, had the sibling
// been connected then: it gets the links the node dialled, those it received are
// replaced. Without a sibling back, the link waits for its end to return.
func (s *Service) failoverAway(ctx context.Context, n store.Node, w *work) error {
	if n.Group == "" {
		return nil
	}
	group, err := s.store.ListNodes(ctx, store.NodeFilter{Group: n.Group})
	if err != nil {
		return fmt.Errorf("list nodes of group %s: %w", n.Group, err)
	}
	away := map[string]store.Node{}
	for _, o := range group {
		if !o.Connected && o.ID != n.ID {
			away[o.ID] = o
		}
	}
	if len(away) == 0 {
		return nil
	}
	topo, err := s.topoNow(ctx)
	if err != nil {
		return err
	}
	live, err := s.liveLinksOf(ctx, w, topo, n.Group)
	if err != nil {
		return err
	}
	ends := map[string]bool{}
	for _, l := range live {
		dest := l.DestNodeID
		if dest == "" {
			dest = l.TargetNodeID // made to target it, not yet claimed (incomingLinks)
		}
		for _, id := range []string{l.SourceNodeID, dest} {
			if _, ok := away[id]; ok {
				ends[id] = true
			}
		}
	}
	for _, id := range sortedKeys(ends) {
		s.log.Info("link end still cut off: failed over to a sibling that registered", "node", id, "sibling", n.ID)
		if err := s.failover(ctx, away[id], false, w); err != nil {
			return err
		}
	}
	return nil
}

// linksOf returns the live links n is the source, claimed destination or target of.
func (s *Service) linksOf(ctx context.Context, nodeID string) ([]store.Link, error) {
	var out []store.Link
	seen := map[string]bool{}
	for _, f := range []store.LinkFilter{{SourceNodeID: nodeID}, {DestNodeID: nodeID}, {TargetNodeID: nodeID}} {
		ls, err := s.store.ListLinks(ctx, f)
		if err != nil {
			return nil, fmt.Errorf("list links of %s: %w", nodeID, err)
		}
		for _, l := range ls {
			if !seen[l.ID] {
				seen[l.ID] = true
				out = append(out, l)
			}
		}
	}
	return out, nil
}

// NodeDeregistered handles a graceful deregistration: gateway failover, route cleanup,
// and the node record deleted. session 0 skips the session check.
func (s *Service) NodeDeregistered(ctx context.Context, nodeID string, session uint64) (Result, error) {
	return s.depart(ctx, nodeID, session, true)
}

// NodeDisconnected handles a stream that ended without deregistration: gateway failover
// and route cleanup as for a deregistration, but the node record is kept, marked
// disconnected, for the node to come back. session 0 skips the session check.
func (s *Service) NodeDisconnected(ctx context.Context, nodeID string, session uint64) (Result, error) {
	return s.depart(ctx, nodeID, session, false)
}

// depart is one store transaction: a failure at any of its writes (the node marked
// gone, each link failed over, each route cleaned up, the record deleted) leaves the
// store as it was, so the caller can report it and the next event starts from a
// consistent state.
func (s *Service) depart(ctx context.Context, nodeID string, session uint64, graceful bool) (Result, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	w := newWork()
	err := s.atomically(ctx, func(ctx context.Context) error {
		return s.departTx(ctx, nodeID, session, graceful, w)
	})
	if err != nil {
		return Result{}, err
	}
	s.log.Info("node left", "node", nodeID, "graceful", graceful)
	return w.result(), nil
}

func (s *Service) departTx(ctx context.Context, nodeID string, session uint64, graceful bool, w *work) error {
	n, err := s.store.GetNode(ctx, nodeID)
	if err != nil {
		return fmt.Errorf("node %s leaving: %w", nodeID, err)
	}
	if session != 0 && session != n.Session {
		return fmt.Errorf("%w: node %s is at session %d, not %d", ErrStaleSession, nodeID, n.Session, session)
	}
	// Mark it gone first, so neither failover nor ensure-links picks it.
	if err := s.store.SetNodeConnected(ctx, nodeID, false); err != nil {
		return fmt.Errorf("node %s leaving: %w", nodeID, err)
	}
	n.Connected = false
	if err := s.failover(ctx, n, graceful, w); err != nil {
		return err
	}
	if err := s.cleanupRoutes(ctx, nodeID, w); err != nil {
		return err
	}
	if graceful {
		if err := s.store.DeleteNode(ctx, nodeID); err != nil {
			return fmt.Errorf("delete node %s: %w", nodeID, err)
		}
		if err := s.groupLeft(ctx, n.Group); err != nil {
			return err
		}
	}
	return s.replan(ctx, w)
}
