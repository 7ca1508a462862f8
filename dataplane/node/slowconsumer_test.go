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

// slowBound is the subscriber queue bound of the slow-consumer tests.
const slowBound = 64

// stalledSub subscribes to name and never reads past the first response: once the
// stream's flow-control window and the node's queue for it are full, it is a slow
// consumer.
func stalledSub(t *testing.T, c *client, name string) nodev1.NodeService_SubscribeClient {
	t.Helper()
	n, err := node.ParseName(name)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	st, err := c.Subscribe(ctx, &nodev1.SubscribeRequest{Name: node.NameProto(n)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); err != nil {
		t.Fatal(err)
	}
	return st
}

// runSlowConsumer publishes broadcasts from pubNode to two subscribers on subNode,
// one of which stalls: the stalled one is cut off with RESOURCE_EXHAUSTED naming the
// bound, counted, and the other gets every message; the publisher is never refused.
// The subscribers are clients of clientOf's transport.
func runSlowConsumer(t *testing.T, clientOf func(*testing.T, *fabric.Fabric, string) *client, topology, pubNode, subNode string, groups ...string) {
	f := startFabricWith(t, fabric.Options{Topology: topology, Node: func(c *node.Config) {
		c.SubscriberQueueLen = slowBound
		c.HealthListen = "127.0.0.1:0"
	}}, 1, groups...)
	ctx := deadline(t, 30*time.Second)
	sc := clientOf(t, f, subNode)
	good := sc.subscribe("org/ns/svc")
	pub := clientOf(t, f, pubNode)
	waitReached(t, ctx, pub, good, "org/ns/svc")
	stalled := stalledSub(t, clientOf(t, f, subNode), "org/ns/svc")
	waitAllReached(t, ctx, pub, map[string]*sub{"good": good}, "org/ns/svc")

	// 32 KiB payloads: the stalled stream's 8 MiB window, the batch in flight and the
	// queue fill up after a few hundred of them.
	const total = 1000
	payload := strings.Repeat("x", 32<<10)
	for i := range total {
		if _, err := pub.publish(ctx, "org/ns/svc", fmt.Sprintf("%d:%s", i, payload), true); err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
	}
	seen := map[string]bool{}
	for len(seen) < total {
		m, err := good.next(ctx)
		if err != nil {
			t.Fatalf("the healthy subscriber got %d of %d messages: %v", len(seen), total, err)
		}
		if id, _, ok := strings.Cut(string(m.GetPayload()), ":"); ok {
			seen[id] = true
		}
	}
	// The stalled subscriber reads again: what the stream buffered, then the end.
	rctx := deadline(t, 15*time.Second)
	ended := make(chan error, 1)
	go func() {
		for {
			if _, err := stalled.Recv(); err != nil {
				ended <- err
				return
			}
		}
	}()
	select {
	case err := <-ended:
		if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "slow consumer") || !strings.Contains(err.Error(), fmt.Sprint(slowBound)) {
			t.Fatalf("stalled subscriber ended with %v, want RESOURCE_EXHAUSTED naming a slow consumer and the bound %d", err, slowBound)
		}
	case <-rctx.Done():
		t.Fatal("the stalled subscriber was never cut off")
	}
	addr := f.Node(subNode).HealthAddr()
	if got := metric(t, addr, "switchboard_node_slow_consumers_total"); got != "1" {
		t.Errorf("slow_consumers_total = %q, want 1", got)
	}
	if got := metric(t, addr, `switchboard_node_messages_dropped_total{link="local",reason="slow_consumer"}`); got == "" || got == "0" {
		t.Errorf("messages dropped as slow_consumer = %q, want some", got)
	}
}

// TestSlowConsumerCutOffBehindLink: the publisher is in another group; the link into
// the subscribers' node keeps delivering to the healthy one while the stalled one is
// cut off.
func TestSlowConsumerCutOffBehindLink(t *testing.T) {
	runSlowConsumer(t, clientOf, "links:\n  - group: a\n    neighbors: [b]\n", "a/n1", "b/n1", "a", "b")
}

// TestSlowConsumerCutOffFramed: the same with subscribers on the framed transport,
// where a stalled subscriber fills its connection's socket buffers rather than a
// stream's window.
func TestSlowConsumerCutOffFramed(t *testing.T) {
	runSlowConsumer(t, framedClientOf, "links:\n  - group: a\n    neighbors: [b]\n", "a/n1", "b/n1", "a", "b")
}

// TestSlowConsumerCutOffLocalPublisher: publisher and subscribers on one node. A
// stalled subscriber used to hold every later broadcast up for the publish wait.
func TestSlowConsumerCutOffLocalPublisher(t *testing.T) {
	runSlowConsumer(t, clientOf, "links: []\n", "a/n1", "a/n1", "a")
}
