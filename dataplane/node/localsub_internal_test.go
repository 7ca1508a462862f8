package node

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchboard-mesh/switchboard/dataplane"
)

// runLocalNode runs a node without control plane or registry until the test ends.
func runLocalNode(t *testing.T, cfg Config) *Node {
	t.Helper()
	cfg.NodeID, cfg.Group, cfg.Listen = "n1", "a", "127.0.0.1:0"
	n, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- n.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	})
	return n
}

// TestSlowLocalSubscriberCutOff: a local subscription (SubscribeLocal) nobody drains
// is cut off once its queue is full, saying why; the drained one beside it gets every
// message, and a request it was given fails at once instead of timing out.
func TestSlowLocalSubscriberCutOff(t *testing.T) {
	const bound = 16
	n := runLocalNode(t, Config{SubscriberQueueLen: bound})
	name := dataplane.NewName("org", "ns", "svc")
	stalled := n.SubscribeLocal(name)
	good := n.SubscribeLocal(name)
	var got atomic.Int64
	sawRequest := make(chan struct{})
	go func() {
		for {
			select {
			case q := <-good.ch:
				if q.m.ReplyTo != "" {
					close(sawRequest)
				} else {
					got.Add(1)
				}
				q.cu.release()
			case <-good.done:
				return
			}
		}
	}()
	const total = 200
	for i := range total {
		if _, _, err := n.Publish(name, []byte(fmt.Sprint(i)), true); err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	select {
	case <-stalled.done:
	case <-ctx.Done():
		t.Fatal("the stalled local subscriber was never cut off")
	}
	if stalled.err == nil || !strings.Contains(stalled.err.Error(), "slow consumer") || !strings.Contains(stalled.err.Error(), fmt.Sprint(bound)) {
		t.Fatalf("cut off with %v, want a slow consumer error naming the bound %d", stalled.err, bound)
	}
	for got.Load() < total {
		select {
		case <-ctx.Done():
			t.Fatalf("the drained subscriber got %d of %d messages", got.Load(), total)
		case <-time.After(time.Millisecond):
		}
	}
	// The drained subscriber is alone now: a request goes to it, and when it leaves
	// without answering, the requester hears so at once.
	reqErr := make(chan error, 1)
	go func() {
		_, err := n.Request(ctx, name, []byte("q"), time.Minute)
		reqErr <- err
	}()
	select {
	case <-sawRequest:
	case <-ctx.Done():
		t.Fatal("the request never reached the subscriber")
	}
	n.UnsubscribeLocal(good.id)
	select {
	case err := <-reqErr:
		if err == nil || !strings.Contains(err.Error(), "no responders for org/ns/svc") {
			t.Fatalf("request whose subscriber left: %v, want no responders", err)
		}
	case <-ctx.Done():
		t.Fatal("the request whose subscriber left was not failed")
	}
}

// TestLocalResponderAnswersAtOnce: a subscriber that answers a request the moment it
// is queued finds it given to itself (the answer is never refused as unknown).
func TestLocalResponderAnswersAtOnce(t *testing.T) {
	n := runLocalNode(t, Config{})
	name := dataplane.NewName("org", "ns", "echo")
	s := n.SubscribeLocal(name)
	refused := make(chan error, 1)
	go func() {
		for {
			select {
			case q := <-s.ch:
				if err := n.Respond(q.m.ReplyTo, []byte("pong")); err != nil {
					select {
					case refused <- err:
					default:
					}
				}
				q.cu.release()
			case <-s.done:
				return
			}
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for i := range 500 {
		r, err := n.Request(ctx, name, []byte("ping"), 5*time.Second)
		if err != nil || string(r.Payload) != "pong" || r.Responder != "a/n1" {
			t.Fatalf("request %d: %q from %q, %v", i, r.Payload, r.Responder, err)
		}
	}
	n.UnsubscribeLocal(s.id)
	select {
	case err := <-refused:
		t.Fatalf("an answer was refused: %v", err)
	default:
	}
}
