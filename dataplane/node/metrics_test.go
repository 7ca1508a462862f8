package node_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc/metadata"

	"github.com/switchboard-mesh/switchboard/dataplane/node"
	nodev1 "github.com/switchboard-mesh/switchboard/gen/switchboard/node/v1"
	"github.com/switchboard-mesh/switchboard/internal/fabric"
)

// TestLinkMetrics: after traffic, a node's /metrics has each link's messages in and
// out, its drops by reason, its queue depth and its state, with the right values. The
// drop is made by hand: a raw link stream sends a message with a bad name, which the
// node counts as malformed — and still acknowledges the batch (it is done with it).
func TestLinkMetrics(t *testing.T) {
	f := startFabricWith(t, fabric.Options{Topology: pairAB, Node: func(c *node.Config) {
		c.HealthListen = "127.0.0.1:0"
	}}, 1, "a", "b")
	ctx := deadline(t, 30*time.Second)
	pub := clientOf(t, f, "a/n1")
	s := clientOf(t, f, "b/n1").subscribe("org/ns/svc")
	waitReached(t, ctx, pub, s, "org/ns/svc")
	na, nb := f.Node("a/n1"), f.Node("b/n1")
	link := linkOf(t, ctx, na)
	dir := map[bool]string{true: "in", false: "out"}
	out, in := na, nb // the node that dials the link, and the one that accepted it
	if link.Inbound {
		out, in = nb, na
	}
	want := func(r *fabric.Running, metric, labels string, v float64) {
		t.Helper()
		if got, ok := series(t, r.HealthAddr(), metric)[labels]; !ok || got != v {
			t.Errorf("%s: %s{%s} = %v (present %v), want %v", r.ID(), metric, labels, got, ok, v)
		}
	}
	lbl := fmt.Sprintf("link=%q", link.LinkID)
	before := map[string]float64{
		"a-out": series(t, na.HealthAddr(), "switchboard_node_messages_out_total")[lbl],
		"b-in":  series(t, nb.HealthAddr(), "switchboard_node_messages_in_total")[lbl],
	}
	const n = 25
	for i := range n {
		if _, err := pub.publish(ctx, "org/ns/svc", fmt.Sprint(i), false); err != nil {
			t.Fatal(err)
		}
	}
	for range n {
		if _, err := s.next(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// a/n1 counts a batch out once SendMsg returns, which can be after the far side
	// delivered it: wait for the count (exact all the same) to land.
	wantOut := before["a-out"] + n
	for stop := time.Now().Add(5 * time.Second); time.Now().Before(stop); time.Sleep(10 * time.Millisecond) {
		if series(t, na.HealthAddr(), "switchboard_node_messages_out_total")[lbl] >= wantOut {
			break
		}
	}
	want(na, "switchboard_node_messages_out_total", lbl, wantOut)
	want(nb, "switchboard_node_messages_in_total", lbl, before["b-in"]+n)
	for _, r := range []*fabric.Running{out, in} {
		d := dir[r == in]
		want(r, "switchboard_node_link_up", fmt.Sprintf("direction=%q,%s", d, lbl), 1)
		want(r, "switchboard_node_queue_depth", fmt.Sprintf("direction=%q,%s", d, lbl), 0)
	}
	if got := sumOf(series(t, na.HealthAddr(), "switchboard_node_messages_dropped_total")); got != 0 {
		t.Errorf("a/n1 counted %v drops of a clean run", got)
	}

	// A raw link stream into b/n1 with a message whose name is malformed.
	const raw = "raw-link"
	rctx, cancel := context.WithCancel(metadata.NewOutgoingContext(ctx, metadata.Pairs("sb-link-id", raw, "sb-node", "a/raw", "sb-group", "a")))
	st, err := nodev1.NewLinkServiceClient(dial(t, nb.Addr()).cc).Link(rctx)
	if err != nil {
		t.Fatal(err)
	}
	bad := &nodev1.Message{Name: &nodev1.Name{Org: "o/x", Namespace: "ns", Service: "svc"}, Payload: []byte("x"), Ttl: 3}
	good := &nodev1.Message{Name: &nodev1.Name{Org: "org", Namespace: "ns", Service: "svc"}, Payload: []byte("raw"), Ttl: 3}
	if err := st.Send(&nodev1.LinkFrame{Frame: &nodev1.LinkFrame_Batch{Batch: &nodev1.Batch{Seq: 1, Messages: []*nodev1.Message{bad, good}}}}); err != nil {
		t.Fatal(err)
	}
	if m, err := s.next(ctx); err != nil || string(m.GetPayload()) != "raw" {
		t.Fatalf("the good message of the raw batch: %v %v", m, err)
	}
	for {
		f, err := st.Recv()
		if err != nil {
			t.Fatalf("no ack of the raw batch: %v", err)
		}
		if a := f.GetBatchAck(); a != nil {
			if a.GetSeq() != 1 {
				t.Fatalf("ack of seq %d, want 1", a.GetSeq())
			}
			break
		}
	}
	rawLbl := fmt.Sprintf("link=%q", raw)
	want(nb, "switchboard_node_messages_in_total", rawLbl, 2)
	want(nb, "switchboard_node_messages_dropped_total", rawLbl+`,reason="malformed"`, 1)
	want(nb, "switchboard_node_link_up", `direction="in",`+rawLbl, 1)
	// The stream breaks (not a clean close): the link waits for its dialer, down.
	cancel()
	for {
		if v, ok := series(t, nb.HealthAddr(), "switchboard_node_link_up")[`direction="in",`+rawLbl]; ok && v == 0 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("link_up of the broken raw link (waiting for its dialer) never read 0")
		case <-time.After(20 * time.Millisecond):
		}
	}
}
