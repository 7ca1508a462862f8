package dataplane

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	controllerv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/controller/v1"
)

// errAckTimeout is the status of a subscription whose datapath ack never came.
var errAckTimeout = errors.New("subscription ack timeout")

// handle serves one queued CP request on the session's work loop.
func (c *Controller) handle(s *session, msg *controllerv1.ControlMessage) {
	var reply *controllerv1.ControlMessage
	switch p := msg.GetPayload().(type) {
	case *controllerv1.ControlMessage_ConfigCommand:
		c.applyCommand(s, msg.GetMessageId(), p.ConfigCommand)
		return
	case *controllerv1.ControlMessage_ConnectionListRequest:
		reply = &controllerv1.ControlMessage{Payload: &controllerv1.ControlMessage_ConnectionListResponse{
			ConnectionListResponse: c.connectionList()}}
	case *controllerv1.ControlMessage_SubscriptionListRequest:
		reply = &controllerv1.ControlMessage{Payload: &controllerv1.ControlMessage_SubscriptionListResponse{
			SubscriptionListResponse: c.subscriptionList()}}
	}
	reply.MessageId, reply.ReplyTo = c.newMsgID(), msg.GetMessageId()
	c.sendOrLog(s, reply)
}

func (c *Controller) sendOrLog(s *session, msg *controllerv1.ControlMessage) {
	if err := s.send(msg); err != nil {
		c.cfg.Logger.Debug("send to control plane failed", "node", c.nodeLabel(), "reply_to", msg.GetReplyTo(), "err", err)
	}
}

// applyCommand runs the four sections in the spec's order. Connection and delete
// results are known at once; subscription results arrive through the message-id
// map, and the ack goes out when the last one is in.
func (c *Controller) applyCommand(s *session, id string, cmd *controllerv1.ConfigCommand) {
	ctx := s.ctx
	pc := &pendingCmd{sess: s, msgID: id, ack: &controllerv1.ConfigCommandAck{}}
	v := c.view()
	handover := c.handovers(v, cmd)
	for _, link := range cmd.GetConnectionsToDelete() {
		if id, ok := handover[link]; ok {
			pc.ack.ConnectionsStatus = append(pc.ack.ConnectionsStatus, c.handOff(v, link, id))
			continue
		}
		pc.ack.ConnectionsStatus = append(pc.ack.ConnectionsStatus, c.deleteConnection(ctx, v, link))
	}
	for _, conn := range cmd.GetConnectionsToCreate() {
		pc.ack.ConnectionsStatus = append(pc.ack.ConnectionsStatus, c.createConnection(ctx, v, conn))
	}
	// A connection handed off that no create took (its create was malformed) is
	// deleted after all, as acknowledged.
	for id := range v.handed {
		_ = c.disconnect(ctx, v, id)
	}
	for _, sub := range cmd.GetSubscriptionsToSet() {
		c.setSubscription(ctx, v, pc, sub)
	}
	for _, sub := range cmd.GetSubscriptionsToDelete() {
		pc.ack.SubscriptionsStatus = append(pc.ack.SubscriptionsStatus, c.deleteSubscription(ctx, v, sub))
	}
	if len(cmd.GetConnectionsReceived()) > 0 {
		c.cfg.Logger.Warn("ignoring connections_received from control plane", "node", c.nodeLabel())
	}
	c.mu.Lock()
	pc.sectionsOK = true
	done := c.completeLocked(pc)
	c.mu.Unlock()
	if done {
		c.sendAck(pc)
	}
}

func connStatus(link string, err error) *controllerv1.ConnectionStatus {
	if err != nil {
		return &controllerv1.ConnectionStatus{LinkId: link, Error: err.Error()}
	}
	return &controllerv1.ConnectionStatus{LinkId: link, Success: true}
}

// deleteConnection: section 1. Unknown links answer "connection not found", which
// the CP counts as already deleted.
func (c *Controller) deleteConnection(ctx context.Context, v *linkView, link string) *controllerv1.ConnectionStatus {
	id, ok := v.byLink[link]
	c.mu.Lock()
	delete(c.state.links, link)
	delete(v.byLink, link)
	shared := false
	for _, other := range v.byLink {
		shared = shared || other == id
	}
	c.mu.Unlock()
	if !ok {
		return connStatus(link, ErrConnNotFound)
	}
	if shared {
		// Another link reuses this connection; only this link's name for it goes.
		c.mu.Lock()
		c.state.hidden[link] = id
		c.mu.Unlock()
		return connStatus(link, nil)
	}
	err := c.disconnect(ctx, v, id)
	if errors.Is(err, ErrConnNotFound) {
		return connStatus(link, ErrConnNotFound)
	}
	if err != nil {
		return connStatus(link, fmt.Errorf("disconnect: %w", err))
	}
	return connStatus(link, nil)
}

// disconnect closes id and forgets it and its subscriptions.
func (c *Controller) disconnect(ctx context.Context, v *linkView, id ConnID) error {
	err := c.dp.Disconnect(ctx, id)
	v.remove(id)
	c.forgetSubsOf(id)
	return err
}

// handovers finds the connections cmd deletes only to dial their endpoint again for
// another link, as the CP asks after a restart (every link comes back under a new id,
// and the old connection is in the way of the new one). With a Relinker datapath such a
// connection is handed over to the new link instead of being closed and dialled again.
// It returns deleted link -> connection. A connection shared with a link that stays,
// or a link deleted and created again under its own id (the CP thinks the connection
// broken), is not handed over.
func (c *Controller) handovers(v *linkView, cmd *controllerv1.ConfigCommand) map[string]ConnID {
	if _, ok := c.dp.(Relinker); !ok || len(cmd.GetConnectionsToDelete()) == 0 {
		return nil
	}
	creating := map[string]string{} // endpoint -> link created to it
	for _, conn := range cmd.GetConnectionsToCreate() {
		if _, live := v.byLink[conn.GetLinkId()]; live || conn.GetLinkId() == "" {
			continue
		}
		if _, endpoint, err := parseConnConfig(conn); err == nil {
			creating[endpoint] = conn.GetLinkId()
		}
	}
	names := v.linksOf()
	out := map[string]ConnID{}
	for _, link := range cmd.GetConnectionsToDelete() {
		id, ok := v.byLink[link]
		if !ok {
			continue
		}
		ci := v.byID[id]
		next, ok := creating[ci.Endpoint]
		if !ok || ci.Inbound || next == link || v.byEndpoint[ci.Endpoint] != id || len(names[id]) != 1 {
			continue
		}
		out[link] = id
		delete(creating, ci.Endpoint)
	}
	return out
}

// handOff: section 1 for a connection being handed over. The link's name for it goes
// now; the connection waits in the view for the create that takes it.
func (c *Controller) handOff(v *linkView, link string, id ConnID) *controllerv1.ConnectionStatus {
	c.mu.Lock()
	delete(c.state.links, link)
	c.mu.Unlock()
	delete(v.byLink, link)
	v.handed[id] = true
	return connStatus(link, nil)
}

// leftover reports a connection none of whose links this session created: the control
// plane that made it is gone (a restart brings every link back under a new id), and a
// link it now creates to the same endpoint takes the connection over. Reused as it is,
// the connection would keep its old link id on the far end, which would never claim
// the new link.
func (c *Controller) leftover(v *linkView, id ConnID) bool {
	if _, ok := c.dp.(Relinker); !ok {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, link := range v.linksOf()[id] {
		if c.state.links[link] == id {
			return false
		}
	}
	return true
}

// takeOver relabels a connection for link: one handed off in this command, or a
// leftover. If the datapath cannot, the connection is closed, and the caller dials.
func (c *Controller) takeOver(ctx context.Context, v *linkView, id ConnID, link string) bool {
	delete(v.handed, id)
	err := c.dp.(Relinker).Relink(ctx, id, link)
	if err == nil {
		if ci, ok := v.byID[id]; ok {
			ci.LinkID = link
			v.byID[id] = ci
		}
		for old, cid := range v.byLink {
			if cid == id {
				delete(v.byLink, old) // its names go with the hand-over
			}
		}
		return true
	}
	c.cfg.Logger.Warn("connection not handed over, dialling again", "node", c.nodeLabel(), "link", link, "err", err)
	_ = c.disconnect(ctx, v, id)
	return false
}

func (c *Controller) forgetSubsOf(id ConnID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k := range c.state.subs {
		if k.conn == id {
			delete(c.state.subs, k)
		}
	}
}

// createConnection: section 2. A live connection for the link, or any outgoing one
// to the same endpoint, is reused instead of dialing again; one handed off in this
// command, or left over from before the control plane restarted, is relabelled for
// the link (handed over).
func (c *Controller) createConnection(ctx context.Context, v *linkView, conn *controllerv1.Connection) *controllerv1.ConnectionStatus {
	link := conn.GetLinkId()
	if link == "" {
		return connStatus(link, errors.New("connection has no link_id"))
	}
	cfg, endpoint, err := parseConnConfig(conn)
	if err != nil {
		return connStatus(link, err)
	}
	if _, ok := v.byLink[link]; ok {
		return connStatus(link, nil)
	}
	id, ok := v.byEndpoint[endpoint]
	if ok && (v.handed[id] || c.leftover(v, id)) {
		ok = c.takeOver(ctx, v, id, link)
	}
	if !ok {
		if id, err = c.dp.Connect(ctx, link, endpoint, cfg); err != nil {
			return connStatus(link, fmt.Errorf("connect %s: %w", endpoint, err))
		}
		v.add(ConnInfo{ID: id, LinkID: link, Endpoint: endpoint})
	}
	v.byLink[link] = id
	c.mu.Lock()
	c.state.links[link] = id
	delete(c.state.hidden, link)
	c.mu.Unlock()
	return connStatus(link, nil)
}

// parseConnConfig checks config_json is a JSON object and finds the endpoint: the
// Connection's own, else the config's "endpoint" field.
func parseConnConfig(conn *controllerv1.Connection) (json.RawMessage, string, error) {
	raw := conn.GetConfigJson()
	if raw == "" {
		raw = "{}"
	}
	var fields map[string]any
	if err := json.Unmarshal([]byte(raw), &fields); err != nil {
		return nil, "", fmt.Errorf("config_json is not a JSON object: %w", err)
	}
	if fields == nil {
		// JSON null decodes into a map without an error, and leaves it nil.
		return nil, "", errors.New("config_json is not a JSON object: null")
	}
	endpoint := conn.GetEndpoint()
	if endpoint == "" {
		endpoint, _ = fields["endpoint"].(string)
	}
	if endpoint == "" {
		return nil, "", errors.New("connection has no endpoint (neither field nor config_json.endpoint)")
	}
	return json.RawMessage(raw), endpoint, nil
}

// nameOf converts a wire subscription; the component id is optional.
func nameOf(sub *controllerv1.Subscription) (Name, error) {
	n := NewName(sub.GetComponent_0(), sub.GetComponent_1(), sub.GetComponent_2())
	if sub.ComponentId != nil {
		if *sub.ComponentId == NoComponentID {
			return n, fmt.Errorf("component_id %d is reserved", NoComponentID)
		}
		n.ComponentID = *sub.ComponentId
	}
	return n, n.Validate()
}

// toProto is the wire form of n over link ("" for an announcement).
func (n Name) toProto(link string) *controllerv1.Subscription {
	s := &controllerv1.Subscription{
		Component_0: n.Components[0], Component_1: n.Components[1], Component_2: n.Components[2], LinkId: link,
	}
	if n.HasID() {
		id := n.ComponentID
		s.ComponentId = &id
	}
	return s
}

// deleteSubscription: section 4. When the link's connection is gone its
// subscriptions went with it, so the answer is "subscription not found" (success to
// the CP), never "connection not found" (which would requeue forever).
func (c *Controller) deleteSubscription(ctx context.Context, v *linkView, sub *controllerv1.Subscription) *controllerv1.SubscriptionStatus {
	st := &controllerv1.SubscriptionStatus{Subscription: sub}
	fail := func(err error) *controllerv1.SubscriptionStatus { st.Error = err.Error(); return st }
	name, err := nameOf(sub)
	if err != nil {
		return fail(err)
	}
	id, ok := v.byLink[sub.GetLinkId()]
	if !ok {
		return fail(ErrSubNotFound)
	}
	key := subKey{name, id}
	c.mu.Lock()
	subID, ok := c.state.subs[key]
	delete(c.state.subs, key)
	c.mu.Unlock()
	if !ok {
		// Not one this controller made (installed around it, or lost with a session
		// reset): the datapath itself still knows it.
		if subID, ok = c.datapathSubscription(key); !ok {
			return fail(ErrSubNotFound)
		}
	}
	err = c.dp.Unsubscribe(ctx, id, subID)
	switch {
	case errors.Is(err, ErrSubNotFound), errors.Is(err, ErrConnNotFound):
		return fail(ErrSubNotFound)
	case err != nil:
		return fail(fmt.Errorf("unsubscribe: %w", err))
	}
	st.Success = true
	return st
}

// datapathSubscription looks a subscription up in the datapath rather than in the
// controller's own table.
func (c *Controller) datapathSubscription(key subKey) (SubID, bool) {
	for _, s := range c.dp.Subscriptions() {
		if s.Conn == key.conn && s.Name == key.name {
			return s.ID, true
		}
	}
	return 0, false
}
