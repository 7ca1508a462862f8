package southbound

import (
	"context"
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/switchboard-mesh/switchboard/controlplane/nodestream"
	"github.com/switchboard-mesh/switchboard/controlplane/store"
	controllerv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/controller/v1"
)

func TestHandshakeRules(t *testing.T) {
	f := newFixture(t, nil, 200*time.Millisecond)
	t.Run("first message must register", func(t *testing.T) {
		n := f.open()
		n.send(&controllerv1.ControlMessage{MessageId: "x", Payload: &controllerv1.ControlMessage_ConnectionListRequest{}})
		wantStatus(t, n.recvErr(), codes.FailedPrecondition, "must be a RegisterNodeRequest")
	})
	t.Run("registration timeout", func(t *testing.T) {
		n := f.open()
		wantStatus(t, n.recvErr(), codes.DeadlineExceeded, "no RegisterNodeRequest within 200ms")
		if o := f.lastOutcome(); o != OutcomeTimeout {
			t.Fatalf("outcome %q", o)
		}
	})
	t.Run("invalid node id", func(t *testing.T) {
		n := f.open()
		n.send(registerMsg("cloud", "bad id!", ""))
		wantStatus(t, n.recvErr(), codes.InvalidArgument, "node id")
		if nodes, _ := f.st.ListNodes(context.Background(), store.NodeFilter{}); len(nodes) != 0 {
			t.Fatalf("invalid node saved: %v", nodes)
		}
	})
	t.Run("accepted", func(t *testing.T) {
		f.register("cloud", "n1", "")
		n, err := f.st.GetNode(context.Background(), "cloud/n1")
		if err != nil || !n.Connected || len(n.ConnDetails) != 1 || !n.ConnDetails[0].MTLSRequired || n.ExternalEndpoint() != "ext-n1:443" {
			t.Fatalf("saved node %+v, %v", n, err)
		}
		if !f.streams.Connected("cloud/n1") {
			t.Fatal("stream not handed to the command handler")
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		if len(f.queued) == 0 || len(f.queued[len(f.queued)-1].LinkNodes) == 0 {
			t.Fatalf("registration did not queue the node for reconciliation: %v", f.queued)
		}
	})
}

func announceMsg(id string, set, del []*controllerv1.Subscription, claims ...string) *controllerv1.ControlMessage {
	cmd := &controllerv1.ConfigCommand{SubscriptionsToSet: set, SubscriptionsToDelete: del}
	for _, c := range claims {
		cmd.ConnectionsReceived = append(cmd.ConnectionsReceived, &controllerv1.Connection{LinkId: c})
	}
	return &controllerv1.ControlMessage{MessageId: id, Payload: &controllerv1.ControlMessage_ConfigCommand{ConfigCommand: cmd}}
}

func sub(link string) *controllerv1.Subscription {
	return &controllerv1.Subscription{Component_0: "org", Component_1: "ns", Component_2: "svc", LinkId: link}
}

// TestNodeInitiatedConfig: announcements, withdrawals and claims from the node are
// applied inline and acknowledged per item; repeats are no-ops; what only the CP may
// send is refused.
func TestNodeInitiatedConfig(t *testing.T) {
	f := newFixture(t, nil, 0)
	edge := f.register("edge", "n1", "")
	cloud := f.register("cloud", "n1", "")
	ctx := context.Background()
	links, _ := f.st.ListLinks(ctx, store.LinkFilter{})
	if len(links) != 1 {
		t.Fatalf("links %v", links)
	}
	l := links[0]
	dest := map[string]*node{"edge/n1": edge, "cloud/n1": cloud}[l.TargetNodeID]
	name := store.NewName("org", "ns", "svc")

	for round := range 2 { // the second round is a node replaying after re-registration
		edge.send(announceMsg("a1", []*controllerv1.Subscription{sub("")}, nil))
		dest.send(announceMsg("c1", nil, nil, l.ID))
		for _, n := range []*node{edge, dest} {
			ack := n.recv()
			if ack.GetConfigCommandAck() == nil {
				t.Fatalf("round %d: answer %v", round, ack)
			}
			for _, st := range ack.GetConfigCommandAck().GetSubscriptionsStatus() {
				if !st.GetSuccess() {
					t.Fatalf("round %d: announcement refused: %v", round, st)
				}
			}
			for _, st := range ack.GetConfigCommandAck().GetConnectionsStatus() {
				if !st.GetSuccess() || st.GetLinkId() != l.ID {
					t.Fatalf("round %d: claim refused: %v", round, st)
				}
			}
		}
		tpls, _ := f.st.ListRoutes(ctx, store.RouteFilter{SourceNodeID: store.AllNodes, Name: &name})
		if len(tpls) != 1 || tpls[0].DestNodeID != "edge/n1" {
			t.Fatalf("round %d: templates %v", round, tpls)
		}
		if got, _ := f.st.GetLink(ctx, l.ID); got.DestNodeID != l.TargetNodeID || got.Status != store.LinkApplied {
			t.Fatalf("round %d: claimed link %+v", round, got)
		}
	}

	// Withdraw twice: the second finds nothing and still succeeds.
	for range 2 {
		edge.send(announceMsg("w1", nil, []*controllerv1.Subscription{sub("")}))
		if st := edge.recv().GetConfigCommandAck().GetSubscriptionsStatus(); len(st) != 1 || !st[0].GetSuccess() {
			t.Fatalf("withdrawal: %v", st)
		}
	}
	if tpls, _ := f.st.ListRoutes(ctx, store.RouteFilter{SourceNodeID: store.AllNodes}); len(tpls) != 0 {
		t.Fatalf("withdrawn template left: %v", tpls)
	}

	// Refused: subscriptions with a link, connections to create or delete, unknown claims.
	edge.send(&controllerv1.ControlMessage{MessageId: "r1", Payload: &controllerv1.ControlMessage_ConfigCommand{ConfigCommand: &controllerv1.ConfigCommand{
		SubscriptionsToSet:  []*controllerv1.Subscription{sub(l.ID)},
		ConnectionsToCreate: []*controllerv1.Connection{{LinkId: "x"}}, ConnectionsToDelete: []string{"y"},
		ConnectionsReceived: []*controllerv1.Connection{{LinkId: "no-such-link"}},
	}}})
	ack := edge.recv().GetConfigCommandAck()
	if len(ack.GetSubscriptionsStatus()) != 1 || ack.GetSubscriptionsStatus()[0].GetSuccess() {
		t.Fatalf("linked subscription from a node accepted: %v", ack)
	}
	if len(ack.GetConnectionsStatus()) != 3 {
		t.Fatalf("connection statuses %v", ack.GetConnectionsStatus())
	}
	for _, st := range ack.GetConnectionsStatus() {
		if st.GetSuccess() || st.GetError() == "" {
			t.Fatalf("refused item reported %v", st)
		}
	}
}

// TestDeregistrationAnswersBeforeRemoving: the response arrives, then the stream ends
// and the node record is gone.
func TestDeregistrationAnswersBeforeRemoving(t *testing.T) {
	f := newFixture(t, nil, 0)
	n := f.register("cloud", "n1", "")
	n.send(&controllerv1.ControlMessage{MessageId: "d1", Payload: &controllerv1.ControlMessage_DeregisterNodeRequest{
		DeregisterNodeRequest: &controllerv1.DeregisterNodeRequest{NodeId: "cloud/n1"}}})
	resp := n.recv()
	if !resp.GetDeregisterNodeResponse().GetSuccess() || resp.GetReplyTo() != "d1" {
		t.Fatalf("deregistration answered with %v", resp)
	}
	if err := n.recvErr(); err == nil {
		t.Fatal("stream still open")
	}
	eventually(t, "node record deleted", func() bool {
		_, err := f.st.GetNode(context.Background(), "cloud/n1")
		return errors.Is(err, store.ErrNotFound)
	})
	if f.streams.Connected("cloud/n1") {
		t.Fatal("stream still registered")
	}
}

// TestCrashFailsWaitersAtOnce: a stream that ends without deregistration releases
// requests waiting on it immediately, and the node is kept, disconnected.
func TestCrashFailsWaitersAtOnce(t *testing.T) {
	f := newFixture(t, nil, 0)
	n := f.register("cloud", "n1", "")
	errc := make(chan error, 1)
	start := time.Now()
	go func() {
		_, err := f.streams.Request(context.Background(), "cloud/n1", &controllerv1.ControlMessage{
			Payload: &controllerv1.ControlMessage_ConnectionListRequest{ConnectionListRequest: &controllerv1.ConnectionListRequest{}}})
		errc <- err
	}()
	if req := n.recv(); req.GetConnectionListRequest() == nil {
		t.Fatalf("request not delivered: %v", req)
	}
	n.cancel() // the node dies without answering
	select {
	case err := <-errc:
		if !errors.Is(err, nodestream.ErrStreamClosed) {
			t.Fatalf("waiter got %v, want ErrStreamClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("waiter still blocked after the stream ended")
	}
	if waited := time.Since(start); waited > 10*time.Second {
		t.Fatalf("waited %s", waited)
	}
	eventually(t, "node marked disconnected", func() bool {
		nd, err := f.st.GetNode(context.Background(), "cloud/n1")
		return err == nil && !nd.Connected
	})
}

// TestReplacedStreamIsNotACrash: a node that registers again on a new stream before
// its old one ends stays connected when the old one goes.
func TestReplacedStreamIsNotACrash(t *testing.T) {
	f := newFixture(t, nil, 0)
	old := f.register("cloud", "n1", "")
	f.register("cloud", "n1", "")
	old.cancel()
	if err := old.recvErr(); err == nil {
		t.Fatal("old stream still open")
	}
	time.Sleep(200 * time.Millisecond) // time for a wrongly counted crash to show
	nd, err := f.st.GetNode(context.Background(), "cloud/n1")
	if err != nil || !nd.Connected || nd.Session != 2 || !f.streams.Connected("cloud/n1") {
		t.Fatalf("node after its old stream ended: %+v, %v, stream %v", nd, err, f.streams.Connected("cloud/n1"))
	}
}
