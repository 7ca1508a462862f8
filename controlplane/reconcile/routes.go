package reconcile

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/switchboard-mesh/switchboard/controlplane/store"
	controllerv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/controller/v1"
	"github.com/switchboard-mesh/switchboard/internal/controllerproto"
	"github.com/switchboard-mesh/switchboard/internal/tracing"
)

// RouteOptions configure a Routes reconciler. Subscriptions the CP does not track are
// deleted whatever enable_orphan_detection says (that option is about connections),
// except those over links the CP has no record of, which belong to the link
// reconciler (unknownLink).
type RouteOptions struct {
	Store store.Store
	Nodes Nodes
	// EnqueueLinks queues nodes for the link reconciler.
	EnqueueLinks func(nodeIDs ...string)
	Logger       *slog.Logger
}

// Routes is the route reconciler (docs/controlplane.md, "How it converges"): it brings the
// subscriptions of one node, its key, in line with the routes stored for it.
type Routes struct {
	o RouteOptions
}

// NewRoutes returns a route reconciler; Sync is its work-queue function.
func NewRoutes(o RouteOptions) *Routes {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	o.Nodes = logSilence(o.Nodes, o.Logger)
	if o.EnqueueLinks == nil {
		o.EnqueueLinks = func(...string) {}
	}
	return &Routes{o: o}
}

// nodeState is what the pre-flight queries found on the node.
type nodeState struct {
	conns map[string]liveConn // by live link id
	subs  map[subKey]bool     // active (name, link) subscriptions
	asked time.Time           // just before the node was asked
}

// routePlan is one pass's decisions: what to subscribe and unsubscribe, keyed by the
// subscription so that acks find their route (nil for an orphan).
type routePlan struct {
	set, del map[subKey]*store.Route
	setOrder []subKey
	delOrder []subKey
	// errs are the writes made while classifying that the core's changes refused
	// (each wraps ErrRetrySoon).
	errs []error
}

func (p *routePlan) add(to map[subKey]*store.Route, order *[]subKey, k subKey, r *store.Route) {
	if _, dup := to[k]; !dup {
		*order = append(*order, k)
	}
	to[k] = r
}

func (p *routePlan) command() *controllerv1.ConfigCommand {
	cmd := &controllerv1.ConfigCommand{}
	for _, k := range p.setOrder {
		cmd.SubscriptionsToSet = append(cmd.SubscriptionsToSet, SubscriptionProto(k.name, k.link))
	}
	for _, k := range p.delOrder {
		cmd.SubscriptionsToDelete = append(cmd.SubscriptionsToDelete, SubscriptionProto(k.name, k.link))
	}
	return cmd
}

// Sync reconciles the routes whose source is nodeID. It returns an error wrapping
// ErrRetrySoon when a subscribe hit "connection not found" (the connection vanished
// after the pre-flight check), any other error to retry with backoff.
func (r *Routes) Sync(ctx context.Context, nodeID string) (err error) {
	if tracing.Enabled() { // tracing.go
		var end func(error)
		ctx, end = startPass(ctx, spanRoutes, nodeID)
		defer func() { end(err) }()
	}
	ok, err := connected(ctx, r.o.Store, r.o.Nodes, nodeID)
	if err != nil || !ok {
		return err
	}
	routes, err := r.o.Store.ListRoutes(ctx, store.RouteFilter{SourceNodeID: nodeID, Deleted: store.IncludeDeleted})
	if err != nil {
		return fmt.Errorf("list routes of %s: %w", nodeID, err)
	}
	// Asked even with no routes: what the node holds beyond them goes.
	live, err := r.preflight(ctx, nodeID, len(routes) > 0)
	if err != nil {
		return err
	}
	// The status writes of a pass are one store transaction each side of the round
	// trip: a node with a thousand routes costs two commits, not thousands. Each
	// write stands on its own inside it (a refused one is reported, the others are
	// kept), so the transaction itself never fails for one of them.
	var plan *routePlan
	err = r.o.Store.Atomically(ctx, func(ctx context.Context) error {
		plan, err = r.classify(ctx, nodeID, routes, live)
		return err
	})
	if err != nil {
		return err
	}
	cmd := plan.command()
	noteCommand(ctx, cmd)
	if len(cmd.SubscriptionsToSet)+len(cmd.SubscriptionsToDelete) == 0 {
		return settle(plan.errs)
	}
	ack, err := send(ctx, r.o.Nodes, nodeID, cmd)
	if err != nil {
		return err
	}
	var result error
	if err := r.o.Store.Atomically(ctx, func(ctx context.Context) error {
		result = r.processAck(ctx, nodeID, plan, ack)
		return nil
	}); err != nil {
		return err
	}
	return result
}

// preflight asks for the node's connections and subscriptions at the same time. The
// connections matter only to routes: without any, every subscription goes.
func (r *Routes) preflight(ctx context.Context, nodeID string, conns bool) (nodeState, error) {
	var (
		st             = nodeState{asked: time.Now()}
		connErr, subEr error
		wg             sync.WaitGroup
	)
	if conns {
		wg.Go(func() { st.conns, connErr = liveConnections(ctx, r.o.Nodes, nodeID) })
	}
	wg.Go(func() { st.subs, subEr = liveSubscriptions(ctx, r.o.Nodes, nodeID) })
	wg.Wait()
	return st, errors.Join(connErr, subEr)
}

// classify applies the spec's per-route rules.
func (r *Routes) classify(ctx context.Context, nodeID string, routes []store.Route, live nodeState) (*routePlan, error) {
	// Sized for the routes not yet Applied, which a pass mostly subscribes: the first
	// pass after a planning step finds a thousand of them on a gateway.
	pending := 0
	for i := range routes {
		if !routes[i].Deleted && routes[i].Status != store.RouteApplied {
			pending++
		}
	}
	p := &routePlan{set: make(map[subKey]*store.Route, pending), del: map[subKey]*store.Route{}, setOrder: make([]subKey, 0, pending)}
	links := linkCache{st: r.o.Store}
	tracked := make(map[subKey]bool, len(routes))
	for i := range routes {
		rt := &routes[i]
		k := subKey{rt.Name, rt.LinkID}
		tracked[k] = true
		if rt.Deleted {
			if err := r.classifyDeleted(ctx, p, rt, k, live); err != nil {
				return nil, err
			}
			continue
		}
		l, err := links.get(ctx, rt.LinkID)
		if err != nil {
			return nil, err
		}
		if r.linkReady(ctx, p, nodeID, rt, l, live) {
			r.classifyLive(ctx, p, rt, k, live)
		}
	}
	for k := range live.subs {
		if tracked[k] || sharesTracked(k, tracked, live.conns) {
			continue
		}
		unknown, err := r.unknownLink(ctx, &links, k.link)
		if err != nil {
			return nil, err
		}
		if unknown {
			continue
		}
		kept, err := r.keptOverAdopted(ctx, &links, nodeID, k)
		if err != nil {
			return nil, err
		}
		if !kept {
			p.add(p.del, &p.delOrder, k, nil)
		}
	}
	return p, nil
}

// unknownLink reports whether a subscription's link is one this control plane has
// no record of. Such a subscription is left to the link reconciler: after a restart
// the nodes still name their connections by the old link ids, and the link
// reconciler hands each connection over to its new link (the subscriptions go with
// it) or removes it. Deleting them here would cut delivery over a connection that is
// about to be handed over.
func (r *Routes) unknownLink(ctx context.Context, links *linkCache, id string) (bool, error) {
	if id == "" {
		return false, nil
	}
	l, err := links.get(ctx, id)
	return l == nil, err
}

// keptOverAdopted reports whether an untracked subscription is one a partition of
// the control plane left behind on a link it adopted (controlplane.Service
// NodeRegistered): the link is Applied and still marked adopted (store.LinkAdopted),
// nodeID is one of its ends, and its far end is still cut off. When both ends of a
// link lose the control plane, their routes go with their streams — the subscriber's
// announcements withdrawn, the publisher's routes hard-deleted — while the data plane
// keeps forwarding. The first end back adopts the link, but the far end's
// announcements come back only after it registers again; the planner then tracks the
// subscription again under the same key, and re-subscribing is idempotent. Deleting
// it meanwhile would refuse publishes (no route). The far end's registration clears
// the mark: from then on the planner decides, as for any link.
func (r *Routes) keptOverAdopted(ctx context.Context, links *linkCache, nodeID string, k subKey) (bool, error) {
	if k.link == "" {
		return false, nil
	}
	l, err := links.get(ctx, k.link)
	if err != nil || l == nil || l.Deleted || l.Status != store.LinkApplied || l.StatusMessage != store.LinkAdopted {
		return false, err
	}
	far := l.SourceNodeID
	switch nodeID {
	case l.SourceNodeID:
		far = l.DestNodeID
	case l.DestNodeID:
	default:
		return false, nil
	}
	if far == "" {
		return false, nil
	}
	n, err := r.o.Store.GetNode(ctx, far)
	if errors.Is(err, store.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("far end %s of link %s: %w", far, l.ID, err)
	}
	return !n.Connected, nil
}

// sharesTracked reports whether the orphan subscription k is, on the data plane, the
// very subscription of a tracked route: several links may name one connection, and a
// node lists each subscription under every name of its connection. Deleting k would
// delete that route's subscription too.
func sharesTracked(k subKey, tracked map[subKey]bool, conns map[string]liveConn) bool {
	c, ok := conns[k.link]
	if !ok || c.conn == 0 { // a node that does not say which connection: assume none is shared
		return false
	}
	for link, other := range conns {
		if link != k.link && other.conn == c.conn && tracked[subKey{k.name, link}] {
			return true
		}
	}
	return false
}

// classifyDeleted: a deleted route still on the node is unsubscribed; one already
// gone is hard-deleted without a round trip.
func (r *Routes) classifyDeleted(ctx context.Context, p *routePlan, rt *store.Route, k subKey, live nodeState) error {
	if live.subs[k] {
		p.add(p.del, &p.delOrder, k, rt)
		return nil
	}
	if err := r.o.Store.DeleteRouteIf(ctx, rt.ID, rt.Version); err != nil && !errors.Is(err, store.ErrNotFound) {
		return conflicted("hard-delete route", fmt.Errorf("hard-delete route %d: %w", rt.ID, err))
	}
	return nil
}

// linkReady checks the route's link: missing -> skip; Failed -> route Failed; not yet
// Applied -> defer to the link reconciler; Applied but not live on this node -> back
// to the link reconciler (linkDown).
func (r *Routes) linkReady(ctx context.Context, p *routePlan, nodeID string, rt *store.Route, l *store.Link, live nodeState) bool {
	switch {
	case l == nil || l.Deleted:
		r.o.Logger.Debug("route skipped: link gone", "route", rt.ID, "link", rt.LinkID)
		return false
	case l.Status == store.LinkFailed:
		p.errs = append(p.errs, r.markFailed(ctx, rt, "link "+l.ID+" failed: "+l.StatusMessage))
		return false
	case l.Status != store.LinkApplied:
		r.o.EnqueueLinks(l.SourceNodeID)
		return false
	}
	if _, up := live.conns[l.ID]; !up {
		p.errs = append(p.errs, r.linkDown(ctx, nodeID, l, live.asked))
		return false
	}
	return true
}

// linkDown hands a link that is Applied but not live on nodeID back to the link
// reconciler of its source. On the source itself that reconciler sees the connection
// missing and dials again; on the destination side the source still holds its end, so
// the link is reset to Pending to make the source dial anew. A link that changed since
// the node was asked is left alone: the list may predate its new connection, and
// resetting it would have it dialled twice (whoever changed it queues this node). The
// reset is conditional on the version read, so a change that lands after the read is
// not overwritten either (the conflict is not an error: the source is queued anyway).
func (r *Routes) linkDown(ctx context.Context, nodeID string, l *store.Link, asked time.Time) error {
	defer func() { l.Status = store.LinkPending }() // the cache: other routes over it defer
	if l.SourceNodeID == nodeID {
		r.o.EnqueueLinks(l.SourceNodeID)
		return nil
	}
	cur, err := r.o.Store.GetLink(ctx, l.ID)
	if err != nil || cur.LastUpdated.After(asked) || cur.Status != store.LinkApplied {
		return nil
	}
	defer r.o.EnqueueLinks(l.SourceNodeID)
	_, err = store.SetLinkStatusIf(ctx, r.o.Store, l.ID, cur.Version, store.LinkPending, "connection not live on "+nodeID)
	if errors.Is(err, store.ErrConflict) || errors.Is(err, store.ErrNotFound) {
		r.o.Logger.Debug("link not reset: changed meanwhile", "link", l.ID, "err", err)
		return nil
	}
	if err != nil {
		return rejected(r.o.Logger, fmt.Errorf("reset link %s: %w", l.ID, err), "link", l.ID, "node", nodeID, "to", store.LinkPending.String())
	}
	return nil
}

// classifyLive: an active subscription is Applied without a round trip; anything else
// is (re)subscribed, going back to Pending first (a Failed route, or an Applied one
// whose subscription the node lost). A route the core changed since it was listed is
// left for the next pass.
func (r *Routes) classifyLive(ctx context.Context, p *routePlan, rt *store.Route, k subKey, live nodeState) {
	if live.subs[k] {
		if rt.Status != store.RouteApplied || rt.StatusMessage != "" {
			p.errs = append(p.errs, r.markApplied(ctx, rt))
		}
		return
	}
	if rt.Status != store.RoutePending {
		if err := r.setStatus(ctx, rt, store.RoutePending, ""); err != nil {
			p.errs = append(p.errs, err)
			return
		}
	}
	p.add(p.set, &p.setOrder, k, rt)
}

// processAck applies the node's per-subscription statuses.
func (r *Routes) processAck(ctx context.Context, nodeID string, p *routePlan, ack *controllerv1.ConfigCommandAck) error {
	errs := p.errs
	for _, st := range ack.GetSubscriptionsStatus() {
		k := subKey{NameFromProto(st.GetSubscription()), st.GetSubscription().GetLinkId()}
		if rt, ok := p.del[k]; ok {
			delete(p.del, k)
			errs = append(errs, r.unsubscribed(ctx, nodeID, rt, k, st))
			continue
		}
		rt, ok := p.set[k]
		if !ok {
			r.o.Logger.Warn("ack for a subscription not sent", "node", nodeID, "name", k.name.String(), "link", k.link)
			continue
		}
		delete(p.set, k)
		switch {
		case st.GetSuccess():
			errs = append(errs, r.markApplied(ctx, rt))
		case st.GetError() == controllerproto.ConnectionNotFound:
			// Left Pending; the next pass finds the link down and resets it.
			errs = append(errs, fmt.Errorf("%w: a connection of %s went away before its subscription was sent", ErrRetrySoon, nodeID))
		default:
			errs = append(errs, r.markFailed(ctx, rt, st.GetError()),
				fmt.Errorf("subscribe %s over %s on %s: %s", k.name, k.link, nodeID, st.GetError()))
		}
	}
	if n := len(p.set) + len(p.del); n > 0 {
		errs = append(errs, fmt.Errorf("ack from %s misses %d subscription statuses", nodeID, n))
	}
	return settle(errs)
}

// unsubscribed: success or "not found" hard-deletes the route (orphans have none).
func (r *Routes) unsubscribed(ctx context.Context, nodeID string, rt *store.Route, k subKey, st *controllerv1.SubscriptionStatus) error {
	gone := st.GetSuccess() || st.GetError() == controllerproto.SubscriptionNotFound ||
		st.GetError() == controllerproto.ConnectionNotFound
	if !gone {
		return fmt.Errorf("unsubscribe %s over %s on %s: %s", k.name, k.link, nodeID, st.GetError())
	}
	if rt == nil {
		r.o.Logger.Info("orphan subscription deleted", "node", nodeID, "name", k.name.String(), "link", k.link)
		return nil
	}
	if err := r.o.Store.DeleteRouteIf(ctx, rt.ID, rt.Version); err != nil && !errors.Is(err, store.ErrNotFound) {
		return conflicted("hard-delete route", fmt.Errorf("hard-delete route %d: %w", rt.ID, err))
	}
	return nil
}

// setStatus moves a route unless, meanwhile, it was deleted or moved to another node
// (a failover): then its new owner's reconcile decides. The write is conditional on
// rt.Version, the version this pass decided from, and brings it forward; a route the
// core changed in any other way since is not overwritten, and the error returned
// (wrapping ErrRetrySoon) has the node synced again from fresh state.
func (r *Routes) setStatus(ctx context.Context, rt *store.Route, st store.RouteStatus, msg string) error {
	if rt.Status != st || rt.StatusMessage != msg {
		// The write is conditional on rt.Version, so where it succeeds the stored
		// route was rt, and reading it first would have decided the same: the
		// reconciler's million acks at 10,000 nodes skip that read. Where it fails
		// (changed, deleted, refused), the route is read and decided on as below.
		if next, err := store.SetRouteStatusIf(ctx, r.o.Store, rt.ID, rt.Version, st, msg); err == nil {
			rt.Version, rt.Status = next.Version, next.Status
			return nil
		}
	}
	cur, err := r.o.Store.GetRoute(ctx, rt.ID)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil // hard-deleted meanwhile: nothing to record
	case err != nil:
		return fmt.Errorf("route %d: %w", rt.ID, err)
	case cur.Deleted || cur.SourceNodeID != rt.SourceNodeID || cur.LinkID != rt.LinkID:
		return nil
	}
	if cur.Status == st && cur.StatusMessage == msg {
		return nil
	}
	next, err := store.SetRouteStatusIf(ctx, r.o.Store, rt.ID, rt.Version, st, msg)
	switch {
	case errors.Is(err, store.ErrConflict):
		return conflicted(fmt.Sprintf("route %d -> %s", rt.ID, st), err)
	case err != nil:
		return rejected(r.o.Logger, fmt.Errorf("route %d on %s: %s -> %s: %w", rt.ID, rt.SourceNodeID, cur.Status, st, err),
			"route", rt.ID, "node", rt.SourceNodeID, "from", cur.Status.String(), "to", st.String())
	}
	rt.Version, rt.Status = next.Version, next.Status
	return nil
}

// markApplied records an active subscription; a Failed route passes through Pending,
// as the state machine requires (a subscribe whose ack came after the node's timer
// fired failed, but the node kept the subscription).
func (r *Routes) markApplied(ctx context.Context, rt *store.Route) error {
	if rt.Status == store.RouteFailed {
		if err := r.setStatus(ctx, rt, store.RoutePending, ""); err != nil {
			return err
		}
	}
	return r.setStatus(ctx, rt, store.RouteApplied, "")
}

// markFailed records msg; an Applied route passes through Pending, as the state
// machine requires.
func (r *Routes) markFailed(ctx context.Context, rt *store.Route, msg string) error {
	if rt.Status == store.RouteApplied {
		if err := r.setStatus(ctx, rt, store.RoutePending, msg); err != nil {
			return err
		}
	}
	return r.setStatus(ctx, rt, store.RouteFailed, msg)
}

// linkCache reads each link once per pass.
type linkCache struct {
	st    store.Store
	links map[string]*store.Link
}

// get returns the link, or nil when it does not exist.
func (c *linkCache) get(ctx context.Context, id string) (*store.Link, error) {
	if l, ok := c.links[id]; ok {
		return l, nil
	}
	if c.links == nil {
		c.links = map[string]*store.Link{}
	}
	l, err := c.st.GetLink(ctx, id)
	switch {
	case errors.Is(err, store.ErrNotFound):
		c.links[id] = nil
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("link %s: %w", id, err)
	}
	c.links[id] = &l
	return &l, nil
}
