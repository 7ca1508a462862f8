package node_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/switchboard-mesh/switchboard/dataplane/node"
	nodev1 "github.com/switchboard-mesh/switchboard/gen/switchboard/node/v1"
	"github.com/switchboard-mesh/switchboard/internal/fabric"
)

// framedClientOf is a client of node id that calls the API on the framed transport.
func framedClientOf(t *testing.T, f *fabric.Fabric, id string) *client {
	t.Helper()
	r := f.Node(id)
	if r == nil {
		t.Fatalf("no node %s", id)
	}
	return &client{t: t, NodeServiceClient: nodev1.NewNodeServiceClient(node.NewFramedClient(r.Addr(), node.FramedOptions{}))}
}

// TestFramedClientAcrossLink: every kind of call of the client API works on the
// framed transport (unary, client-, server- and bidirectional streams), across a
// link, with the statuses gRPC's calls return.
func TestFramedClientAcrossLink(t *testing.T) {
	f := startFabric(t, "links:\n  - group: a\n    neighbors: [b]\n", 1, "a", "b")
	ctx := deadline(t, 30*time.Second)
	a, b := framedClientOf(t, f, "a/n1"), framedClientOf(t, f, "b/n1")

	s := b.subscribe("org/ns/svc")
	waitReached(t, ctx, a, s, "org/ns/svc")
	ps, err := a.PublishStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	const total = 300
	for i := range total / 100 {
		batch := &nodev1.PublishBatch{}
		for j := range 100 {
			batch.Messages = append(batch.Messages, &nodev1.PublishRequest{Name: nameOf(t, "org/ns/svc"), Payload: fmt.Appendf(nil, "m%d", i*100+j)})
		}
		if err := ps.Send(batch); err != nil {
			t.Fatalf("publish batch %d: %v", i, err)
		}
	}
	sum, err := ps.CloseAndRecv()
	if err != nil || sum.GetAccepted() != total || sum.GetForwarded() != total {
		t.Fatalf("PublishStream summary %v, %v; want %d accepted and forwarded", sum, err, total)
	}
	for i := range total {
		m, err := s.next(ctx)
		if err != nil || string(m.GetPayload()) != fmt.Sprintf("m%d", i) {
			t.Fatalf("message %d: %v, %v", i, m, err)
		}
	}

	// Requests: unary, answered by unary Respond calls, and streamed, answered on a
	// RespondStream.
	b.respond("org/ns/echo", "b")
	if r := waitAnswered(t, ctx, a, "org/ns/echo"); string(r.GetPayload()) != "b:ping" {
		t.Fatalf("unary request answered %q, want b:ping", r.GetPayload())
	}
	b.streamRespond("org/ns/stream", "s")
	req, err := node.NewRequester(ctx, a.NodeServiceClient)
	if err != nil {
		t.Fatal(err)
	}
	defer req.Close()
	for {
		r, err := req.Request(ctx, &nodev1.RequestRequest{Name: nameOf(t, "org/ns/stream"), Payload: []byte("x"), TimeoutMs: 1000})
		if err == nil {
			if string(r.GetPayload()) != "s:x" {
				t.Fatalf("streamed request answered %q, want s:x", r.GetPayload())
			}
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("no answer on the request stream: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}

	// Failures keep their codes.
	if _, err := a.publish(ctx, "org/ns/nobody", "x", false); status.Code(err) != codes.NotFound {
		t.Errorf("publish to a name nobody subscribes to: %v, want NOT_FOUND", err)
	}
	big := strings.Repeat("x", node.DefaultMaxMessageBytes+1)
	if _, err := a.publish(ctx, "org/ns/svc", big, false); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "limit") {
		t.Errorf("publish above the limit: %v, want INVALID_ARGUMENT naming the limit", err)
	}
	if _, err := a.request(ctx, "org/ns/nobody", "x", time.Second); status.Code(err) != codes.Unavailable {
		t.Errorf("request without responders: %v, want UNAVAILABLE", err)
	}
	fc := node.NewFramedClient(f.Node("a/n1").Addr(), node.FramedOptions{})
	err = fc.Invoke(ctx, "/switchboard.node.v1.NodeService/NoSuchMethod", &nodev1.PublishRequest{}, &nodev1.PublishResponse{})
	if status.Code(err) != codes.Unimplemented {
		t.Errorf("unknown method: %v, want UNIMPLEMENTED", err)
	}
}

// TestFramedSubscriberLeaving: a subscriber that goes away (its call cancelled, its
// connection closed) ends its subscription at once, with nothing published to notice
// it by.
func TestFramedSubscriberLeaving(t *testing.T) {
	f := startFabricWith(t, fabric.Options{Topology: "links: []\n", Node: func(c *node.Config) {
		c.HealthListen = "127.0.0.1:0"
	}}, 1, "a")
	ctx := deadline(t, 30*time.Second)
	c := framedClientOf(t, f, "a/n1")
	sctx, cancel := context.WithCancel(ctx)
	st, err := c.Subscribe(sctx, &nodev1.SubscribeRequest{Name: nameOf(t, "org/ns/svc")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); err != nil {
		t.Fatal(err)
	}
	addr := f.Node("a/n1").HealthAddr()
	if got := metric(t, addr, "switchboard_node_local_subscriptions"); got != "1" {
		t.Fatalf("local_subscriptions = %q with a subscriber, want 1", got)
	}
	cancel()
	if _, err := st.Recv(); status.Code(err) != codes.Canceled {
		t.Errorf("Recv after cancel: %v, want CANCELED", err)
	}
	// Well before the node's first keepalive ping (half the 10 s interval), whose
	// failed write would end it too.
	soon := deadline(t, 4*time.Second)
	for metric(t, addr, "switchboard_node_local_subscriptions") != "0" {
		if soon.Err() != nil {
			t.Fatal("the subscription outlived its cancelled call")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestFramedCallsEndWhenNodeStops: a node that stops gracefully ends its framed calls
// (a publisher's stream with UNAVAILABLE, a subscriber's cleanly) instead of leaving
// them open.
func TestFramedCallsEndWhenNodeStops(t *testing.T) {
	f := startFabric(t, "links: []\n", 1, "a")
	ctx := deadline(t, 30*time.Second)
	c := framedClientOf(t, f, "a/n1")
	st, err := c.Subscribe(ctx, &nodev1.SubscribeRequest{Name: nameOf(t, "org/ns/svc")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); err != nil {
		t.Fatal(err)
	}
	ps, err := c.PublishStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.StopNode("a/n1", false); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); err == nil || status.Code(err) == codes.DeadlineExceeded {
		t.Errorf("subscriber's Recv after the node stopped: %v, want the stream's end", err)
	}
	if _, err := ps.CloseAndRecv(); status.Code(err) != codes.Unavailable {
		t.Errorf("publisher's stream after the node stopped: %v, want UNAVAILABLE", err)
	}
}
