package dataplane

import (
	"cmp"
	"errors"
	"maps"
	"slices"

	controllerv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/controller/v1"
)

// Claim reports a connection this node accepted for a CP link (the spec's link claim:
// ConfigCommand.connections_received).
type Claim struct {
	LinkID       string
	Endpoint     string
	RemoteNodeID string
}

// Announce declares that name is reachable at this node: a subscription without
// link_id, which the CP turns into a wildcard route. Announcements are state, not
// events: they are sent now when registered, and replayed on every new session
// (while disconnected they only queue), because the CP drops a node's wildcard
// templates when its stream breaks.
func (c *Controller) Announce(name Name) error {
	if err := name.Validate(); err != nil {
		return err
	}
	c.notify(func() { c.announced[name] = struct{}{} },
		&controllerv1.ConfigCommand{SubscriptionsToSet: []*controllerv1.Subscription{name.toProto("")}})
	return nil
}

// Withdraw retracts an announcement (subscriptions_to_delete without link_id).
func (c *Controller) Withdraw(name Name) error {
	if err := name.Validate(); err != nil {
		return err
	}
	c.notify(func() { delete(c.announced, name) },
		&controllerv1.ConfigCommand{SubscriptionsToDelete: []*controllerv1.Subscription{name.toProto("")}})
	return nil
}

// ClaimLink reports an accepted connection for claim.LinkID; like announcements,
// claims are replayed on every new session until ReleaseClaim.
func (c *Controller) ClaimLink(claim Claim) error {
	if claim.LinkID == "" {
		return errors.New("dataplane: claim has no link id")
	}
	c.notify(func() { c.claims[claim.LinkID] = claim },
		&controllerv1.ConfigCommand{ConnectionsReceived: []*controllerv1.Connection{claim.toProto()}})
	return nil
}

// ReleaseClaim stops replaying the claim for linkID (its connection is gone; the CP
// learns that from connection lists and the next registration).
func (c *Controller) ReleaseClaim(linkID string) {
	c.notify(func() { delete(c.claims, linkID) }, nil)
}

func (cl Claim) toProto() *controllerv1.Connection {
	return &controllerv1.Connection{LinkId: cl.LinkID, Endpoint: cl.Endpoint, RemoteNodeId: cl.RemoteNodeID}
}

// notify applies update and, when a session is registered, sends cmd on it. A send
// that fails is not retried here: the next session replays the whole state.
func (c *Controller) notify(update func(), cmd *controllerv1.ConfigCommand) {
	c.notifyMu.Lock()
	defer c.notifyMu.Unlock()
	c.mu.Lock()
	update()
	s := c.sess
	c.mu.Unlock()
	if cmd == nil || s == nil || !s.registered.Load() {
		return
	}
	c.sendNotification(s, cmd)
}

// flushNotifications replays every announcement and claim on a fresh session.
func (c *Controller) flushNotifications(s *session) {
	c.notifyMu.Lock()
	defer c.notifyMu.Unlock()
	c.mu.Lock()
	cmd := &controllerv1.ConfigCommand{}
	for _, n := range slices.SortedFunc(maps.Keys(c.announced), compareNames) {
		cmd.SubscriptionsToSet = append(cmd.SubscriptionsToSet, n.toProto(""))
	}
	for _, link := range slices.Sorted(maps.Keys(c.claims)) {
		cmd.ConnectionsReceived = append(cmd.ConnectionsReceived, c.claims[link].toProto())
	}
	c.mu.Unlock()
	if len(cmd.SubscriptionsToSet)+len(cmd.ConnectionsReceived) > 0 {
		c.sendNotification(s, cmd)
	}
}

func (c *Controller) sendNotification(s *session, cmd *controllerv1.ConfigCommand) {
	c.sendOrLog(s, &controllerv1.ControlMessage{
		MessageId: c.newMsgID(),
		Payload:   &controllerv1.ControlMessage_ConfigCommand{ConfigCommand: cmd},
	})
}

func compareNames(a, b Name) int {
	return cmp.Or(cmp.Compare(a.Components[0], b.Components[0]), cmp.Compare(a.Components[1], b.Components[1]),
		cmp.Compare(a.Components[2], b.Components[2]), cmp.Compare(a.ComponentID, b.ComponentID))
}
