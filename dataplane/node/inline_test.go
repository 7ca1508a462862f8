package node_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	nodev1 "github.com/switchboard-mesh/switchboard/gen/switchboard/node/v1"
)

// TestInlineWritesKeepOrder: a message that comes alone is written by the goroutine
// that has it when its stream is idle, and queued behind the others when not. One
// publisher's messages, alone and in large batches in turn, reach subscribers in the
// order they were published: one across the link and one on the publisher's own node
// (both on the framed transport, where inline writes happen), and one across the link
// on gRPC (never inline).
func TestInlineWritesKeepOrder(t *testing.T) {
	f := startFabric(t, "links:\n  - group: a\n    neighbors: [b]\n", 1, "a", "b")
	ctx := deadline(t, 60*time.Second)
	pub := framedClientOf(t, f, "a/n1")
	subs := map[string]*sub{
		"framed, across the link": framedClientOf(t, f, "b/n1").subscribe("org/ns/svc"),
		"framed, same node":       framedClientOf(t, f, "a/n1").subscribe("org/ns/svc"),
		"gRPC, across the link":   clientOf(t, f, "b/n1").subscribe("org/ns/svc"),
	}
	waitAllReached(t, ctx, pub, subs, "org/ns/svc")

	ps, err := pub.PublishStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Batches of 100 keep the link's and the subscribers' writers busy, so that the
	// messages alone after them find a queue to wait in.
	payload := strings.Repeat("x", 4<<10)
	total := 0
	for round := range 30 {
		for _, size := range []int{100, 1, 1, 60, 1} {
			batch := &nodev1.PublishBatch{}
			for range size {
				batch.Messages = append(batch.Messages, &nodev1.PublishRequest{Name: nameOf(t, "org/ns/svc"), Payload: fmt.Appendf(nil, "%d:%s", total, payload), Broadcast: true})
				total++
			}
			if err := ps.Send(batch); err != nil {
				t.Fatalf("round %d: publish: %v", round, err)
			}
		}
	}
	if sum, err := ps.CloseAndRecv(); err != nil || sum.GetAccepted() != uint64(total) {
		t.Fatalf("PublishStream summary %v, %v; want %d accepted", sum, err, total)
	}
	for what, s := range subs {
		for want := range total {
			m, err := s.next(ctx)
			if err != nil {
				t.Fatalf("%s: message %d of %d: %v", what, want, total, err)
			}
			if got, _, _ := strings.Cut(string(m.GetPayload()), ":"); got != fmt.Sprint(want) {
				t.Fatalf("%s: message %s arrived where %d was due", what, got, want)
			}
		}
	}
}
