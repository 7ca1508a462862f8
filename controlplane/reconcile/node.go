package reconcile

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/switchboard-mesh/switchboard/controlplane/store"
	controllerv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/controller/v1"
)

// Nodes is what the reconcilers need from the node command handler
// (*nodestream.Handler): whether a node has a stream, a request/response round trip
// on it, and the log of a node that stops answering and answers again (each change
// logged once, by whichever requester comes first).
type Nodes interface {
	Connected(nodeID string) bool
	Request(ctx context.Context, nodeID string, msg *controllerv1.ControlMessage) (*controllerv1.ControlMessage, error)
	LogSilence(log *slog.Logger, nodeID string)
}

// silenceLogged is Nodes that logs after every request whether the node has stopped
// answering or answers again: a silent node is warned about at its first timeout,
// not only once the queue has given up on it after every retry.
type silenceLogged struct {
	Nodes
	log *slog.Logger
}

func logSilence(n Nodes, log *slog.Logger) Nodes {
	if n == nil {
		return nil
	}
	return silenceLogged{Nodes: n, log: log}
}

func (n silenceLogged) Request(ctx context.Context, nodeID string, msg *controllerv1.ControlMessage) (*controllerv1.ControlMessage, error) {
	resp, err := n.Nodes.Request(ctx, nodeID, msg)
	n.LogSilence(n.log, nodeID)
	return resp, err
}

// connected is the pre-flight check: the node must be recorded as connected and hold
// a stream. A node that is not is skipped, not retried: its next registration queues
// it again.
func connected(ctx context.Context, st store.Store, nodes Nodes, nodeID string) (bool, error) {
	n, err := st.GetNode(ctx, nodeID)
	if errors.Is(err, store.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("pre-flight %s: %w", nodeID, err)
	}
	return n.Connected && nodes.Connected(nodeID), nil
}

// liveConn is one entry of a node's connection list. Several links may share one
// connection (conn).
type liveConn struct {
	endpoint string
	conn     uint64
}

// liveConnections asks the node for its connections by link id. Inbound (accepted)
// connections are listed too.
func liveConnections(ctx context.Context, nodes Nodes, nodeID string) (map[string]liveConn, error) {
	resp, err := nodes.Request(ctx, nodeID, &controllerv1.ControlMessage{
		Payload: &controllerv1.ControlMessage_ConnectionListRequest{ConnectionListRequest: &controllerv1.ConnectionListRequest{}},
	})
	if err != nil {
		return nil, fmt.Errorf("list connections of %s: %w", nodeID, err)
	}
	list := resp.GetConnectionListResponse()
	if list == nil {
		return nil, fmt.Errorf("list connections of %s: node answered with %T", nodeID, resp.GetPayload())
	}
	out := make(map[string]liveConn, len(list.GetEntries()))
	for _, e := range list.GetEntries() {
		if e.GetLinkId() != "" {
			out[e.GetLinkId()] = liveConn{endpoint: e.GetEndpoint(), conn: e.GetConnId()}
		}
	}
	return out, nil
}

// subKey identifies a subscription on a node: a name over a link.
type subKey struct {
	name store.Name
	link string
}

// liveSubscriptions asks the node for its subscriptions. The data plane's
// NULL_COMPONENT sentinel becomes "no component id", as the CP stores names.
func liveSubscriptions(ctx context.Context, nodes Nodes, nodeID string) (map[subKey]bool, error) {
	resp, err := nodes.Request(ctx, nodeID, &controllerv1.ControlMessage{
		Payload: &controllerv1.ControlMessage_SubscriptionListRequest{SubscriptionListRequest: &controllerv1.SubscriptionListRequest{}},
	})
	if err != nil {
		return nil, fmt.Errorf("list subscriptions of %s: %w", nodeID, err)
	}
	list := resp.GetSubscriptionListResponse()
	if list == nil {
		return nil, fmt.Errorf("list subscriptions of %s: node answered with %T", nodeID, resp.GetPayload())
	}
	out := make(map[subKey]bool, len(list.GetSubscriptions()))
	for _, s := range list.GetSubscriptions() {
		out[subKey{NameFromProto(s), s.GetLinkId()}] = true
	}
	return out, nil
}

// NameFromProto converts a wire subscription's name, normalising NULL_COMPONENT to
// "no component id".
func NameFromProto(s *controllerv1.Subscription) store.Name {
	n := store.NewName(s.GetComponent_0(), s.GetComponent_1(), s.GetComponent_2())
	if s.ComponentId != nil {
		n = n.WithID(s.GetComponentId())
	}
	return n
}

// SubscriptionProto is the wire form of name over link.
func SubscriptionProto(n store.Name, link string) *controllerv1.Subscription {
	s := &controllerv1.Subscription{
		Component_0: n.Components[0], Component_1: n.Components[1], Component_2: n.Components[2], LinkId: link,
	}
	if n.HasID {
		id := n.ID
		s.ComponentId = &id
	}
	return s
}

// send delivers cmd to the node and waits for its ConfigCommandAck.
func send(ctx context.Context, nodes Nodes, nodeID string, cmd *controllerv1.ConfigCommand) (*controllerv1.ConfigCommandAck, error) {
	resp, err := nodes.Request(ctx, nodeID, &controllerv1.ControlMessage{
		Payload: &controllerv1.ControlMessage_ConfigCommand{ConfigCommand: cmd},
	})
	if err != nil {
		return nil, fmt.Errorf("config command to %s: %w", nodeID, err)
	}
	ack := resp.GetConfigCommandAck()
	if ack == nil {
		return nil, fmt.Errorf("config command to %s: node answered with %T", nodeID, resp.GetPayload())
	}
	return ack, nil
}
