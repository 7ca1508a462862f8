package southbound

import (
	"context"
	"errors"

	"github.com/google/uuid"

	"github.com/switchboard-mesh/switchboard/controlplane"
	"github.com/switchboard-mesh/switchboard/controlplane/reconcile"
	"github.com/switchboard-mesh/switchboard/controlplane/store"
	controllerv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/controller/v1"
)

func newID() string { return "cp-" + uuid.NewString() }

// nodeCommand processes a ConfigCommand the node sent on its own (a data-plane
// initiated change, docs/controlplane.md), inline, and acknowledges every item. Subscriptions without a
// link id announce (set) or withdraw (delete) a wildcard route to the node;
// connections_received claim links. Connections to create or delete, and
// subscriptions with a link id, are the CP's to give and are refused.
func (s *Server) nodeCommand(ctx context.Context, sess *session, msgID string, cmd *controllerv1.ConfigCommand) {
	ack := &controllerv1.ConfigCommandAck{}
	var results []controlplane.Result
	run := func(res controlplane.Result, err error) error {
		if err == nil {
			results = append(results, res)
		}
		return err
	}
	for _, sub := range cmd.GetSubscriptionsToSet() {
		ack.SubscriptionsStatus = append(ack.SubscriptionsStatus, subStatus(sub, s.announce(ctx, sess.nodeID, sub, run)))
	}
	for _, sub := range cmd.GetSubscriptionsToDelete() {
		ack.SubscriptionsStatus = append(ack.SubscriptionsStatus, subStatus(sub, s.withdraw(ctx, sess.nodeID, sub, run)))
	}
	for _, c := range cmd.GetConnectionsReceived() {
		err := run(s.o.Service.ClaimLink(ctx, sess.nodeID, c.GetLinkId()))
		if err != nil {
			s.o.Logger.Warn("link claim refused", "node", sess.nodeID, "link", c.GetLinkId(), "err", err)
		}
		ack.ConnectionsStatus = append(ack.ConnectionsStatus, connStatus(c.GetLinkId(), err))
	}
	for _, c := range cmd.GetConnectionsToCreate() {
		ack.ConnectionsStatus = append(ack.ConnectionsStatus, connStatus(c.GetLinkId(), errNotFromNode))
	}
	for _, link := range cmd.GetConnectionsToDelete() {
		ack.ConnectionsStatus = append(ack.ConnectionsStatus, connStatus(link, errNotFromNode))
	}
	err := sess.st.Send(&controllerv1.ControlMessage{ReplyTo: msgID,
		Payload: &controllerv1.ControlMessage_ConfigCommandAck{ConfigCommandAck: ack}})
	if err != nil {
		s.o.Logger.Debug("ack to node not sent", "node", sess.nodeID, "err", err)
	}
	for _, res := range results {
		s.o.Enqueue(res)
	}
}

var (
	errNotFromNode = errors.New("connections are created and deleted by the control plane, not announced by nodes")
	errLinkedSub   = errors.New("a subscription with a link id is set by the control plane; announce names without one")
)

func (s *Server) announce(ctx context.Context, nodeID string, sub *controllerv1.Subscription, run func(controlplane.Result, error) error) error {
	if sub.GetLinkId() != "" {
		return errLinkedSub
	}
	return run(s.o.Service.AddWildcardRoute(ctx, nodeID, reconcile.NameFromProto(sub)))
}

// withdraw treats a name that is not announced as withdrawn already: a node repeats
// its withdrawals, and the CP drops a crashed node's announcements on its own.
func (s *Server) withdraw(ctx context.Context, nodeID string, sub *controllerv1.Subscription, run func(controlplane.Result, error) error) error {
	if sub.GetLinkId() != "" {
		return errLinkedSub
	}
	err := run(s.o.Service.DeleteWildcardRoute(ctx, nodeID, reconcile.NameFromProto(sub)))
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	return err
}

func subStatus(sub *controllerv1.Subscription, err error) *controllerv1.SubscriptionStatus {
	st := &controllerv1.SubscriptionStatus{Subscription: sub, Success: err == nil}
	if err != nil {
		st.Error = err.Error()
	}
	return st
}

func connStatus(link string, err error) *controllerv1.ConnectionStatus {
	st := &controllerv1.ConnectionStatus{LinkId: link, Success: err == nil}
	if err != nil {
		st.Error = err.Error()
	}
	return st
}
