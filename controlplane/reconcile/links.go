package reconcile

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"

	"github.com/switchboard-mesh/switchboard/controlplane/store"
	controllerv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/controller/v1"
	"github.com/switchboard-mesh/switchboard/internal/controllerproto"
	"github.com/switchboard-mesh/switchboard/internal/tracing"
)

// LinkOptions configure a Links reconciler.
type LinkOptions struct {
	Store store.Store
	Nodes Nodes
	// OrphanDetection deletes live connections the CP does not track
	// (enable_orphan_detection).
	OrphanDetection bool
	// EnqueueRoutes queues nodes for the route reconciler.
	EnqueueRoutes func(nodeIDs ...string)
	Logger        *slog.Logger
}

// Links is the link reconciler (docs/controlplane.md, "How it converges"): it brings the outgoing
// connections of one node, its key, in line with the links stored for it.
type Links struct {
	o LinkOptions
}

// NewLinks returns a link reconciler; Sync is its work-queue function.
func NewLinks(o LinkOptions) *Links {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	o.Nodes = logSilence(o.Nodes, o.Logger)
	if o.EnqueueRoutes == nil {
		o.EnqueueRoutes = func(...string) {}
	}
	return &Links{o: o}
}

// linkPlan is one reconcile pass's classification of a node's links.
type linkPlan struct {
	create []store.Link // desired links to (re)create
	// recreate are desired links live with a stale state: their connection is deleted
	// before it is created again in the same command.
	recreate map[string]bool
	remove   []store.Link // links marked deleted
	// orphans are live link ids the CP does not track that are deleted (see stale). A
	// connection to an endpoint a link is about to dial is not among them: the data
	// plane hands it over to that link.
	orphans []string
	ready   []store.Link // Applied and live: nothing to send
}

func (p *linkPlan) command() *controllerv1.ConfigCommand {
	cmd := &controllerv1.ConfigCommand{}
	for _, l := range p.remove {
		cmd.ConnectionsToDelete = append(cmd.ConnectionsToDelete, l.ID)
	}
	for _, l := range p.create {
		if p.recreate[l.ID] {
			cmd.ConnectionsToDelete = append(cmd.ConnectionsToDelete, l.ID)
		}
	}
	cmd.ConnectionsToDelete = append(cmd.ConnectionsToDelete, p.orphans...)
	for _, l := range p.create {
		cmd.ConnectionsToCreate = append(cmd.ConnectionsToCreate, &controllerv1.Connection{
			LinkId: l.ID, Endpoint: l.DestEndpoint, ConfigJson: l.ConnConfig, RemoteNodeId: l.TargetNodeID,
		})
	}
	return cmd
}

// Sync reconciles the links whose source is nodeID: pre-flight, connection list,
// classification, one ConfigCommand, ack processing. An error asks the queue to retry
// with backoff.
func (r *Links) Sync(ctx context.Context, nodeID string) (err error) {
	if tracing.Enabled() { // tracing.go
		var end func(error)
		ctx, end = startPass(ctx, spanLinks, nodeID)
		defer func() { end(err) }()
	}
	ok, err := connected(ctx, r.o.Store, r.o.Nodes, nodeID)
	if err != nil || !ok {
		return err
	}
	links, err := r.o.Store.ListLinks(ctx, store.LinkFilter{SourceNodeID: nodeID, Deleted: store.IncludeDeleted})
	if err != nil {
		return fmt.Errorf("list links of %s: %w", nodeID, err)
	}
	// Asked even with no links: the node may hold connections of links that are gone
	// (a gateway before a failover or a restart of the control plane).
	live, err := liveConnections(ctx, r.o.Nodes, nodeID)
	if err != nil {
		return err
	}
	plan, err := r.classify(ctx, nodeID, links, live)
	if err != nil {
		return err
	}
	r.routesOver(nodeID, plan.ready)
	cmd := plan.command()
	noteCommand(ctx, cmd)
	if len(cmd.ConnectionsToDelete)+len(cmd.ConnectionsToCreate) == 0 {
		return nil
	}
	// As in the route reconciler, the status writes on each side of the round trip
	// are one store transaction: one commit for a node's links, not one per link.
	if err := r.o.Store.Atomically(ctx, func(ctx context.Context) error {
		return r.markConnecting(ctx, plan.create)
	}); err != nil {
		return err // the core changed a link since it was listed: decide again
	}
	ack, err := send(ctx, r.o.Nodes, nodeID, cmd)
	if err != nil {
		return err
	}
	var result error
	if err := r.o.Store.Atomically(ctx, func(ctx context.Context) error {
		result = r.processAck(ctx, nodeID, plan, cmd, ack)
		return nil
	}); err != nil {
		return err
	}
	return result
}

// classify sorts the node's links against its live connections. A desired link that
// is live is left alone when it is Applied and still dials the stored endpoint;
// otherwise (the endpoint changed, or someone reset it because it looked broken) it
// is recreated.
func (r *Links) classify(ctx context.Context, nodeID string, links []store.Link, live map[string]liveConn) (*linkPlan, error) {
	p := &linkPlan{recreate: map[string]bool{}}
	mine := make(map[string]bool, len(links))
	for _, l := range links {
		mine[l.ID] = true
		c, isLive := live[l.ID]
		switch {
		case l.Deleted:
			p.remove = append(p.remove, l)
		case isLive && l.Status == store.LinkApplied && c.endpoint == l.DestEndpoint:
			p.ready = append(p.ready, l)
		case isLive:
			p.recreate[l.ID] = true
			p.create = append(p.create, l)
		default:
			p.create = append(p.create, l)
		}
	}
	fl := fleet{st: r.o.Store, nodeID: nodeID}
	for id, c := range live {
		if mine[id] {
			continue
		}
		stale, err := r.stale(ctx, &fl, id, c.endpoint, live)
		if err != nil {
			return nil, err
		}
		if stale {
			p.orphans = append(p.orphans, id)
		}
	}
	slices.Sort(p.orphans)
	return p, nil
}

// stale decides whether a live connection whose link this node is not the source of
// is deleted. One of a link this node receives stays. Inter-group
// connections between nodes this control plane manages are its own — only it links
// groups — so one it does not track is left over from before a restart or a failover
// and goes whatever orphan detection says, unless a link between the same two nodes
// is still to be connected: the pass that dials it hands this connection over (or
// replaces it), and deleting it first would have it dialled again. Anything else goes
// only with orphan detection.
func (r *Links) stale(ctx context.Context, fl *fleet, linkID, endpoint string, live map[string]liveConn) (bool, error) {
	orphan, err := r.isOrphan(ctx, fl.nodeID, linkID)
	if err != nil || !orphan {
		return false, err
	}
	peer, err := fl.peer(ctx, endpoint)
	if err != nil {
		return false, err
	}
	var coming []string
	switch {
	case peer.dialer != "":
		coming, err = fl.linksTo(ctx, peer.dialer, fl.self.ExternalEndpoint())
	case peer.listener:
		// The links were listed before the nodes were read: a registration committed
		// in between may have made a link to this endpoint, which the next pass (the
		// registration queues it) hands the connection over to.
		coming, err = fl.linksTo(ctx, fl.nodeID, endpoint)
	default:
		return r.o.OrphanDetection, nil
	}
	if err != nil {
		return false, err
	}
	for _, id := range coming {
		if _, up := live[id]; !up {
			return false, nil
		}
	}
	return true, nil
}

// isOrphan: a live connection is this node's if a live link has it as its claimed or
// targeted destination — connection lists include accepted connections, which must
// survive.
func (r *Links) isOrphan(ctx context.Context, nodeID, linkID string) (bool, error) {
	l, err := r.o.Store.GetLink(ctx, linkID)
	if errors.Is(err, store.ErrNotFound) {
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("orphan check of link %s: %w", linkID, err)
	}
	inbound := l.DestNodeID == nodeID || (l.DestNodeID == "" && l.TargetNodeID == nodeID)
	return l.Deleted || !inbound, nil
}

// markConnecting records that the creates are being sent (Pending -> Connecting). An
// Applied link being dialled again lost its connection or its endpoint: it goes back
// to Pending first, as the state machine requires. Each write is conditional on the
// version classified, and the links' versions are brought forward so that the acks
// are written against what was sent. A link the core changed since the list fails the
// pass with ErrRetrySoon before anything is sent.
func (r *Links) markConnecting(ctx context.Context, links []store.Link) error {
	for i := range links {
		l := &links[i]
		steps := []store.LinkStatus{store.LinkConnecting}
		switch l.Status {
		case store.LinkConnecting:
			continue
		case store.LinkApplied:
			steps = []store.LinkStatus{store.LinkPending, store.LinkConnecting}
		}
		for _, st := range steps {
			cur, err := store.SetLinkStatusIf(ctx, r.o.Store, l.ID, l.Version, st, "")
			if err != nil {
				err = fmt.Errorf("link %s: %s -> %s before sending: %w", l.ID, l.Status, st, err)
				return rejected(r.o.Logger, conflicted("link "+l.ID+" before sending", err),
					"link", l.ID, "node", l.SourceNodeID, "from", l.Status.String(), "to", st.String())
			}
			l.Status, l.Version = cur.Status, cur.Version
		}
	}
	return nil
}

// routesOver queues route reconciliation for both ends of links that are up.
func (r *Links) routesOver(nodeID string, links []store.Link) {
	if len(links) == 0 {
		return
	}
	nodes := []string{nodeID}
	for _, l := range links {
		if l.DestNodeID != "" {
			nodes = append(nodes, l.DestNodeID)
		}
	}
	r.o.EnqueueRoutes(nodes...)
}

// processAck applies the node's answer. The data plane answers the deletes first, then
// the creates, one status each, in command order.
func (r *Links) processAck(ctx context.Context, nodeID string, p *linkPlan, cmd *controllerv1.ConfigCommand, ack *controllerv1.ConfigCommandAck) error {
	statuses := ack.GetConnectionsStatus()
	nDel := len(cmd.ConnectionsToDelete)
	if len(statuses) != nDel+len(cmd.ConnectionsToCreate) {
		return fmt.Errorf("ack from %s has %d connection statuses for %d deletes and %d creates",
			nodeID, len(statuses), nDel, len(cmd.ConnectionsToCreate))
	}
	var errs []error
	for i, l := range p.remove {
		errs = append(errs, r.deleted(ctx, l, statuses[i]))
	}
	for i, id := range cmd.ConnectionsToDelete[len(p.remove):] {
		if st := statuses[len(p.remove)+i]; !st.GetSuccess() && st.GetError() != controllerproto.ConnectionNotFound {
			r.o.Logger.Warn("stale connection not deleted", "node", nodeID, "link", id, "error", st.GetError())
		}
	}
	var up []store.Link
	for i, l := range p.create {
		cur, ok, err := r.created(ctx, nodeID, l, statuses[nDel+i])
		if ok {
			up = append(up, cur)
		}
		errs = append(errs, err)
	}
	r.routesOver(nodeID, up)
	return settle(errs)
}

// deleted: success or "connection not found" is the hard delete, of the link as it was
// listed.
func (r *Links) deleted(ctx context.Context, l store.Link, st *controllerv1.ConnectionStatus) error {
	if err := statusMatches(st, l.ID); err != nil {
		return err
	}
	if !st.GetSuccess() && st.GetError() != controllerproto.ConnectionNotFound {
		return fmt.Errorf("delete link %s on %s: %s", l.ID, l.SourceNodeID, st.GetError())
	}
	if err := r.o.Store.DeleteLinkIf(ctx, l.ID, l.Version); err != nil && !errors.Is(err, store.ErrNotFound) {
		return conflicted("hard-delete link "+l.ID, fmt.Errorf("hard-delete link %s: %w", l.ID, err))
	}
	r.o.Logger.Debug("link deleted", "link", l.ID, "node", l.SourceNodeID)
	return nil
}

// created: success -> Applied, failure -> Failed with the node's message (and an error,
// so the queue retries with backoff).
func (r *Links) created(ctx context.Context, nodeID string, l store.Link, st *controllerv1.ConnectionStatus) (store.Link, bool, error) {
	if err := statusMatches(st, l.ID); err != nil {
		return l, false, err
	}
	status, msg := store.LinkApplied, ""
	if !st.GetSuccess() {
		status, msg = store.LinkFailed, st.GetError()
	}
	cur, mine, err := r.writeAck(ctx, nodeID, l, status, msg)
	if err != nil || !mine {
		return cur, false, err
	}
	if !st.GetSuccess() {
		return cur, false, fmt.Errorf("create link %s on %s: %s", l.ID, nodeID, msg)
	}
	r.o.Logger.Debug("link applied", "link", l.ID, "node", nodeID)
	return cur, true, nil
}

// ackAttempts bounds writeAck's compare-and-set loop. The destination's claim lands
// about when the ack does, so a first conflict is common and a second rare.
const ackAttempts = 3

// writeAck records the create's outcome on l as it was sent. A link that moved to
// another node or was deleted while the command was out is left to whoever owns it now
// (mine is false). One the core reset meanwhile — back to Pending, a new endpoint or
// config — is not overwritten: the error, wrapping ErrRetrySoon, has the node synced
// again from fresh state. Otherwise (the link is as sent, or its destination claimed
// it, which only adds the claimer) the write is conditional on the version just read,
// and a conflict means reading and deciding again.
func (r *Links) writeAck(ctx context.Context, nodeID string, l store.Link, status store.LinkStatus, msg string) (store.Link, bool, error) {
	for attempt := 1; ; attempt++ {
		cur, err := r.o.Store.GetLink(ctx, l.ID)
		if errors.Is(err, store.ErrNotFound) || (err == nil && (cur.Deleted || cur.SourceNodeID != nodeID)) {
			return l, false, nil
		}
		if err != nil {
			return l, false, fmt.Errorf("link %s: %w", l.ID, err)
		}
		if cur.Status == store.LinkPending || cur.DestEndpoint != l.DestEndpoint || cur.ConnConfig != l.ConnConfig {
			return cur, false, fmt.Errorf("%w: link %s was reset while its create was out", ErrRetrySoon, l.ID)
		}
		if cur.Status == status && cur.StatusMessage == msg {
			return cur, true, nil // the claim got there first
		}
		_, err = store.SetLinkStatusIf(ctx, r.o.Store, l.ID, cur.Version, status, msg)
		switch {
		case errors.Is(err, store.ErrConflict) && attempt < ackAttempts:
			continue
		case errors.Is(err, store.ErrConflict):
			return cur, false, conflicted(fmt.Sprintf("link %s -> %s", l.ID, status), err)
		case err != nil:
			return cur, false, rejected(r.o.Logger, fmt.Errorf("link %s: %s -> %s: %w", l.ID, cur.Status, status, err),
				"link", l.ID, "node", nodeID, "from", cur.Status.String(), "to", status.String())
		}
		return cur, true, nil
	}
}

func statusMatches(st *controllerv1.ConnectionStatus, linkID string) error {
	if st.GetLinkId() != linkID {
		return fmt.Errorf("ack out of order: status for link %q where %q was expected", st.GetLinkId(), linkID)
	}
	return nil
}

// fleet is what a pass knows of the other nodes, read only when an untracked
// connection has to be judged.
type fleet struct {
	st     store.Store
	nodeID string

	loaded   bool
	self     store.Node
	external map[string]store.Node // external endpoint -> node
	byID     map[string]store.Node
}

// peerOf says who a connection entry's endpoint belongs to, among the managed nodes of
// other groups: dialer is set for an accepted connection (a data plane names its
// dialer by node id), listener for one this node dialled to a node's external endpoint.
type peerOf struct {
	dialer   string
	listener bool
}

func (f *fleet) load(ctx context.Context) error {
	if f.loaded {
		return nil
	}
	self, err := f.st.GetNode(ctx, f.nodeID)
	if err != nil {
		return fmt.Errorf("node %s: %w", f.nodeID, err)
	}
	nodes, err := f.st.ListNodes(ctx, store.NodeFilter{})
	if err != nil {
		return fmt.Errorf("list nodes: %w", err)
	}
	f.self, f.external, f.byID = self, map[string]store.Node{}, map[string]store.Node{}
	for _, n := range nodes {
		f.byID[n.ID] = n
		if ext := n.ExternalEndpoint(); ext != "" {
			f.external[ext] = n
		}
	}
	f.loaded = true
	return nil
}

// peer classifies endpoint; nodes of this node's own group are not peers (links within
// a group are the data plane's business).
func (f *fleet) peer(ctx context.Context, endpoint string) (peerOf, error) {
	if err := f.load(ctx); err != nil {
		return peerOf{}, err
	}
	if n, ok := f.byID[endpoint]; ok && n.Group != "" && n.Group != f.self.Group {
		return peerOf{dialer: n.ID}, nil
	}
	if n, ok := f.external[endpoint]; ok && n.Group != "" && n.Group != f.self.Group {
		return peerOf{listener: true}, nil
	}
	return peerOf{}, nil
}

// linksTo lists the live links from source to endpoint as they are now. Nodes and
// their links are written in one transaction, and this reads after the nodes were, so
// it sees at least the links of every node peer found.
func (f *fleet) linksTo(ctx context.Context, source, endpoint string) ([]string, error) {
	if endpoint == "" {
		return nil, nil
	}
	links, err := f.st.ListLinks(ctx, store.LinkFilter{SourceNodeID: source})
	if err != nil {
		return nil, fmt.Errorf("list links of %s: %w", source, err)
	}
	var out []string
	for _, l := range links {
		if l.DestEndpoint == endpoint {
			out = append(out, l.ID)
		}
	}
	return out, nil
}
