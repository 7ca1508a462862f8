package controlplane

import (
	"context"
	"errors"
	"fmt"
	"maps"
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
		wasAway := reconnect && !prev.Connected
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
		if err := s.adoptLinks(ctx, n, wasAway, reg.Connections, w); err != nil {
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
	w.committed()
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

// linkEnds are the ends a link had when it was soft-deleted.
type linkEnds struct{ source, dest string }

// adoptLinks takes back the links n reports alive that this control plane marked
// deleted while both their ends were cut off from it. When the last node of a group
// leaves without deregistering, its links are soft-deleted (failover.go); but when
// only the control-plane paths broke — a partition, not a crash — both nodes keep the
// link and forward over it, and on the heal they register again naming it. The first
// of them to come back adopts it: same id, no teardown, and the routes the
// reconcilers would otherwise remove stay on the nodes. Only a link n still holds is
// taken back, and only when that is provably the same link as before:
//   - it was Applied, between these very ends, when it was soft-deleted: the service
//     remembers those links (s.dropped, in memory: a restarted control plane or a new
//     leader, which clears links, adopts none). A link moved to a sibling that never
//     dialled it, or never claimed, is not taken back;
//   - n was cut off too: its previous record is disconnected (a node registering
//     again over a stream the control plane still thought open was never away, and
//     its reconciler may be deleting the link);
//   - n is one of its ends, and the other end is a node whose record is kept (it left
//     without deregistering), still disconnected, and no node of its group is
//     connected: n's live connection is the other end's too, and that end confirms
//     it when it comes back. A dialer reports its link alive even when the far end is
//     dead (it keeps redialling); with a node of the far group back, the groups are
//     linked to it instead (ensureLinks);
//   - the topology still links the two groups, in the same segments, the target
//     still has the endpoint dialled, and no other live link joins the groups.
//
// Otherwise the link stays deleted and the groups are linked anew, as before. A
// registration ends what is remembered of the links n was an end of: taken back now
// or never. The store never takes a record out of Deleted, so the link is
// hard-deleted and created again under its id, within the registration's
// transaction, and its version counted on past the deleted one's: a reconciler pass
// still holding the deleted record finds it changed, and its DeleteLinkIf fails.
func (s *Service) adoptLinks(ctx context.Context, n store.Node, wasAway bool, reports []ConnectionReport, w *work) error {
	s.forgetDropped(n.ID, w)
	if n.Group == "" || !wasAway {
		return nil
	}
	for _, r := range reports {
		e, ok := s.dropped[r.LinkID]
		if !r.Alive || !ok {
			continue
		}
		l, err := s.store.GetLink(ctx, r.LinkID)
		if errors.Is(err, store.ErrNotFound) {
			continue // gone for good
		}
		if err != nil {
			return fmt.Errorf("adopt link %s of %s: %w", r.LinkID, n.ID, err)
		}
		if !l.Deleted || e != (linkEnds{l.SourceNodeID, l.DestNodeID}) {
			continue
		}
		far, err := s.adoptable(ctx, n, l, w)
		if err != nil {
			return err
		}
		if far == "" {
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
		// The store numbers a new record from 1: count on past the deleted one.
		u := store.LinkUpdate{Status: store.Ptr(store.LinkApplied), StatusMessage: store.Ptr(store.LinkAdopted)}
		for v := int64(1); v <= l.Version; u.Status = nil {
			cur, err := s.store.UpdateLink(ctx, l.ID, u)
			if err != nil {
				return fmt.Errorf("adopt link %s of %s: %w", l.ID, n.ID, err)
			}
			v = cur.Version
		}
		s.log.Info("link adopted", "link", l.ID, "node", n.ID, "source", l.SourceNodeID, "dest", l.DestNodeID)
		id := l.ID
		w.onCommit(func() { s.adopted[id] = far })
		w.relinked(l.ID)
		w.link(l.SourceNodeID)
		w.route(l.SourceNodeID)
		w.route(l.DestNodeID)
	}
	return nil
}

// forgetDropped forgets the soft-deleted links nodeID was an end of (s.dropped): it
// registered again, or deregistered. What is left is of nodes that never came back,
// as their records are.
func (s *Service) forgetDropped(nodeID string, w *work) {
	for id, e := range s.dropped {
		if e.source == nodeID || e.dest == nodeID {
			w.onCommit(func() { delete(s.dropped, id) })
		}
	}
}

// adoptable checks the conditions of adoptLinks for the deleted link l that n reports
// alive, and returns its far end ("" when it is not to be adopted).
func (s *Service) adoptable(ctx context.Context, n store.Node, l store.Link, w *work) (string, error) {
	var other string
	switch {
	case l.DestNodeID == "":
		return "", nil // never claimed: nothing says who held the other end
	case l.SourceNodeID == n.ID:
		other = l.DestNodeID
	case l.DestNodeID == n.ID:
		other = l.SourceNodeID
	default:
		return "", nil
	}
	o, err := s.store.GetNode(ctx, other)
	if errors.Is(err, store.ErrNotFound) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("adopt link %s: %w", l.ID, err)
	}
	if o.Connected {
		return "", nil
	}
	back, err := s.store.ListNodes(ctx, store.NodeFilter{Group: o.Group, ConnectedOnly: true})
	if err != nil {
		return "", fmt.Errorf("adopt link %s: %w", l.ID, err)
	}
	if len(back) > 0 {
		return "", nil
	}
	target := n
	if l.TargetNodeID != n.ID {
		if target, err = s.store.GetNode(ctx, l.TargetNodeID); errors.Is(err, store.ErrNotFound) {
			return "", nil
		} else if err != nil {
			return "", fmt.Errorf("adopt link %s: %w", l.ID, err)
		}
	}
	if target.ExternalEndpoint() != l.DestEndpoint {
		return "", nil
	}
	topo, err := s.topoNow(ctx)
	if err != nil {
		return "", err
	}
	segs := topo.segmentsOf(l.SourceGroup, l.DestGroup)
	if len(segs) == 0 || !slices.Equal(segs, segmentsIn(l.ConnConfig)) {
		return "", nil
	}
	live, err := s.liveLinksOf(ctx, w, topo, n.Group)
	if err != nil {
		return "", err
	}
	peer := l.Peer(n.Group)
	for _, x := range live {
		if x.Peer(n.Group) == peer {
			return "", nil
		}
	}
	return other, nil
}

// failoverAway settles the adopted links whose far end is still away (s.adopted) as
// n registers. n is that far end: it is back, the link is an ordinary one again and
// its marker goes (the route reconciler keeps untracked subscriptions over an adopted
// link only while its far end is away). n is a sibling of it: the far end is still
// cut off from the control plane — or gone for good, which the control plane cannot
// tell — and n takes over from it as its departure would have, had n been connected
// then: it gets the links the node dialled, those it received are replaced. Without
// a sibling back, the link waits for its end to return. Only the adopted links are
// looked at, not the group.
func (s *Service) failoverAway(ctx context.Context, n store.Node, w *work) error {
	if len(s.adopted) == 0 {
		return nil
	}
	done := map[string]bool{}
	for _, id := range slices.Sorted(maps.Keys(s.adopted)) {
		far := s.adopted[id]
		if far != n.ID && (n.Group == "" || GroupOf(far) != n.Group) {
			continue
		}
		w.onCommit(func() { delete(s.adopted, id) })
		l, err := s.store.GetLink(ctx, id)
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil {
			return fmt.Errorf("adopted link %s: %w", id, err)
		}
		if l.Deleted || l.StatusMessage != store.LinkAdopted || (l.SourceNodeID != far && l.DestNodeID != far) {
			continue // no longer as adopted: moved, deleted, or its status changed
		}
		if far == n.ID {
			if _, err := s.store.UpdateLink(ctx, id, store.LinkUpdate{StatusMessage: store.Ptr("")}); err != nil {
				return fmt.Errorf("adopted link %s: %w", id, err)
			}
			continue
		}
		o, err := s.store.GetNode(ctx, far)
		if errors.Is(err, store.ErrNotFound) || (err == nil && (o.Connected || done[far])) {
			continue
		}
		if err != nil {
			return fmt.Errorf("end %s of adopted link %s: %w", far, id, err)
		}
		done[far] = true
		s.log.Info("link end still cut off: failed over to a sibling that registered", "node", far, "sibling", n.ID)
		if err := s.failover(ctx, o, false, w); err != nil {
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
	w.committed()
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
		s.forgetDropped(nodeID, w)
		if err := s.groupLeft(ctx, n.Group); err != nil {
			return err
		}
	}
	return s.replan(ctx, w)
}
