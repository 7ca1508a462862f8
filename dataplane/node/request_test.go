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

const pair = "links:\n  - group: a\n    neighbors: [b]\n"

// respond subscribes to name and answers every request with "tag:payload".
func (c *client) respond(name, tag string) *sub {
	c.t.Helper()
	s := c.subscribe(name)
	go func() {
		for m := range s.ch {
			if m.GetReplyTo() == "" {
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_, _ = c.Respond(ctx, &nodev1.RespondRequest{ReplyTo: m.GetReplyTo(), Payload: []byte(tag + ":" + string(m.GetPayload()))})
			cancel()
		}
	}()
	return s
}

func (c *client) request(ctx context.Context, name, payload string, timeout time.Duration) (*nodev1.RequestResponse, error) {
	n, err := node.ParseName(name)
	if err != nil {
		return nil, err
	}
	return c.Request(ctx, &nodev1.RequestRequest{Name: node.NameProto(n), Payload: []byte(payload), TimeoutMs: uint32(timeout.Milliseconds())})
}

// waitAnswered requests until an answer comes (routes take a moment to spread).
func waitAnswered(t *testing.T, ctx context.Context, c *client, name string) *nodev1.RequestResponse {
	t.Helper()
	for {
		r, err := c.request(ctx, name, "ping", time.Second)
		if err == nil {
			return r
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no answer from %s: %v", name, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// TestRequestReplyAcrossLink: a request made in group a reaches the responder in
// group b over the link, and its answer comes back to the requester.
func TestRequestReplyAcrossLink(t *testing.T) {
	f := startFabric(t, pair, 1, "a", "b")
	clientOf(t, f, "b/n1").respond("org/ns/echo", "b")
	req := clientOf(t, f, "a/n1")
	ctx := deadline(t, 30*time.Second)
	waitAnswered(t, ctx, req, "org/ns/echo")
	for i := range 20 {
		r, err := req.request(ctx, "org/ns/echo", fmt.Sprint(i), 5*time.Second)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		if string(r.GetPayload()) != fmt.Sprint("b:", i) || r.GetResponder() != "b/n1" {
			t.Fatalf("request %d: answer %q from %s, want b:%d from b/n1", i, r.GetPayload(), r.GetResponder(), i)
		}
	}
}

// TestRequestAnycastNearestFirst: with responders on the requester's node and in
// another group, the near ones answer, taking turns.
func TestRequestAnycastNearestFirst(t *testing.T) {
	f := startFabric(t, pair, 1, "a", "b")
	clientOf(t, f, "b/n1").respond("org/ns/echo", "far")
	req := clientOf(t, f, "a/n1")
	ctx := deadline(t, 30*time.Second)
	waitAnswered(t, ctx, req, "org/ns/echo")
	req.respond("org/ns/echo", "r1")
	req.respond("org/ns/echo", "r2")
	got := map[string]int{}
	for i := range 20 {
		r, err := req.request(ctx, "org/ns/echo", fmt.Sprint(i), 5*time.Second)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		tag, payload, _ := strings.Cut(string(r.GetPayload()), ":")
		if payload != fmt.Sprint(i) {
			t.Fatalf("request %d answered with %q", i, r.GetPayload())
		}
		got[tag]++
	}
	if got["far"] != 0 || got["r1"] == 0 || got["r2"] == 0 {
		t.Fatalf("answers by responder: %v, want both near ones and never the far one", got)
	}
}

// TestRequestReplyAfterFailover: the gateway of the responder's group crashes; once
// the control plane moved the link to its sibling, requests are answered over it.
func TestRequestReplyAfterFailover(t *testing.T) {
	f := startFabric(t, pair, 2, "a", "b")
	ctx := deadline(t, 60*time.Second)
	gw := gatewayOf(t, f, "b", "a")
	survivor := "b/n1"
	if gw == survivor {
		survivor = "b/n2"
	}
	clientOf(t, f, survivor).respond("org/ns/echo", "b")
	req := clientOf(t, f, "a/n1")
	waitAnswered(t, ctx, req, "org/ns/echo")
	if err := f.StopNode(gw, true); err != nil {
		t.Fatal(err)
	}
	// Until the link fails over, requests fail (no route, or lost with the gateway).
	waitAnswered(t, ctx, req, "org/ns/echo")
	if now := gatewayOf(t, f, "b", "a"); now == gw {
		t.Fatalf("the link is still held by the crashed gateway %s", gw)
	}
	for i := range 10 {
		r, err := req.request(ctx, "org/ns/echo", fmt.Sprint(i), 5*time.Second)
		if err != nil {
			t.Fatalf("request %d after the failover: %v", i, err)
		}
		if string(r.GetPayload()) != fmt.Sprint("b:", i) || r.GetResponder() != survivor {
			t.Fatalf("request %d: answer %q from %s, want b:%d from %s", i, r.GetPayload(), r.GetResponder(), i, survivor)
		}
	}
}

// TestRequestFailsWhenResponderLeaves: the only responder takes a request and leaves
// without answering: the requester is told at once that nobody answers, long before
// its timeout; later requests are refused the same way.
func TestRequestFailsWhenResponderLeaves(t *testing.T) {
	f := startFabric(t, pair, 1, "a", "b")
	sc := clientOf(t, f, "b/n1")
	silent := sc.subscribe("org/ns/echo")
	req := clientOf(t, f, "a/n1")
	ctx := deadline(t, 30*time.Second)
	waitReached(t, ctx, req, silent, "org/ns/echo")

	const timeout = 2 * time.Minute // far beyond the test's deadline
	done := make(chan error, 1)
	go func() {
		_, err := req.request(ctx, "org/ns/echo", "anyone?", timeout)
		done <- err
	}()
	for {
		m, err := silent.next(ctx)
		if err != nil {
			t.Fatalf("the request never reached the responder: %v", err)
		}
		if m.GetReplyTo() != "" {
			break
		}
	}
	if _, err := sc.Unsubscribe(ctx, &nodev1.UnsubscribeRequest{SubscriptionId: silent.id}); err != nil {
		t.Fatal(err)
	}
	checkNoResponders := func(what string, err error) {
		t.Helper()
		if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "no responders for org/ns/echo") {
			t.Fatalf("%s: %v, want UNAVAILABLE no responders for org/ns/echo (not a timeout)", what, err)
		}
	}
	select {
	case err := <-done:
		checkNoResponders("request whose responder left", err)
	case <-ctx.Done():
		t.Fatal("the request whose responder left was not failed before the test's deadline")
	}
	for i := range 5 {
		_, err := req.request(ctx, "org/ns/echo", "anyone?", timeout)
		checkNoResponders(fmt.Sprint("request ", i, " after the responder left"), err)
	}
}

// TestRequestRefusals: an oversized request or answer is refused naming the limit; a
// request nobody subscribes to fails at once; an answer to an unknown request is
// refused.
func TestRequestRefusals(t *testing.T) {
	f := startFabricWith(t, fabric.Options{Topology: "links: []\n", Node: func(c *node.Config) { c.MaxMessageBytes = 1000 }}, 1, "a")
	c := clientOf(t, f, "a/n1")
	ctx := deadline(t, 10*time.Second)
	c.respond("org/ns/echo", "r")
	_, err := c.request(ctx, "org/ns/echo", strings.Repeat("x", 1001), time.Second)
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "payload is 1001 bytes; the limit is 1000 bytes") {
		t.Errorf("oversized request: %v, want INVALID_ARGUMENT naming the limit", err)
	}
	if r, err := c.request(ctx, "org/ns/echo", strings.Repeat("x", 990), 5*time.Second); err != nil || len(r.GetPayload()) != 992 {
		t.Errorf("request at the limit: %v", err)
	}
	_, err = c.request(ctx, "org/ns/nobody", "x", time.Minute)
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "no responders for org/ns/nobody") {
		t.Errorf("request nobody answers: %v, want UNAVAILABLE no responders", err)
	}
	_, err = c.Respond(ctx, &nodev1.RespondRequest{ReplyTo: "a/n1#12345", Payload: []byte("x")})
	if status.Code(err) != codes.NotFound {
		t.Errorf("answer to an unknown request: %v, want NOT_FOUND", err)
	}
	_, err = c.Respond(ctx, &nodev1.RespondRequest{ReplyTo: "a/n1#1", Payload: []byte(strings.Repeat("x", 1001))})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "the limit is 1000 bytes") {
		t.Errorf("oversized answer: %v, want INVALID_ARGUMENT naming the limit", err)
	}
}
