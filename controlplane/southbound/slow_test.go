package southbound

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/switchboard-mesh/switchboard/controlplane"
	"github.com/switchboard-mesh/switchboard/controlplane/nodestream"
	"github.com/switchboard-mesh/switchboard/controlplane/reconcile"
	"github.com/switchboard-mesh/switchboard/controlplane/store"
	controllerv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/controller/v1"
	"github.com/switchboard-mesh/switchboard/internal/cpharness"
)

// runReconcilers starts a link and a route reconciler with one worker each — so a
// worker stuck on one node would stall every other node — fed by the fixture's
// results and a short periodic sweep.
func (f *fixture) runReconcilers() {
	f.t.Helper()
	var linkQ, routeQ *reconcile.Queue
	links := reconcile.NewLinks(reconcile.LinkOptions{Store: f.st, Nodes: f.streams,
		EnqueueRoutes: func(ids ...string) { routeQ.Add(ids...) }})
	routes := reconcile.NewRoutes(reconcile.RouteOptions{Store: f.st, Nodes: f.streams,
		EnqueueLinks: func(ids ...string) { linkQ.Add(ids...) }})
	cfg := func(name string) reconcile.QueueConfig {
		return reconcile.QueueConfig{Name: name, Workers: 1, BaseDelay: 20 * time.Millisecond, MaxDelay: 200 * time.Millisecond}
	}
	linkQ, routeQ = reconcile.NewQueue(cfg("link"), links.Sync), reconcile.NewQueue(cfg("route"), routes.Sync)
	f.mu.Lock()
	f.onEnqueue = func(r controlplane.Result) { linkQ.Add(r.LinkNodes...); routeQ.Add(r.RouteNodes...) }
	f.mu.Unlock()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { linkQ.Run(ctx) })
	wg.Go(func() { routeQ.Run(ctx) })
	wg.Go(func() { reconcile.Sweep(ctx, 200*time.Millisecond, f.streams.Nodes, linkQ, routeQ) })
	f.t.Cleanup(func() { cancel(); wg.Wait() })
}

// bigCommand is a ConfigCommand of about 32 KiB.
func bigCommand() *controllerv1.ControlMessage {
	cmd := &controllerv1.ConfigCommand{}
	pad := strings.Repeat("x", 1000)
	for range 32 {
		cmd.SubscriptionsToDelete = append(cmd.SubscriptionsToDelete,
			&controllerv1.Subscription{Component_0: pad, Component_1: "ns", Component_2: "svc"})
	}
	return &controllerv1.ControlMessage{Payload: &controllerv1.ControlMessage_ConfigCommand{ConfigCommand: cmd}}
}

// TestSlowNodeIsEvicted: a node that registers and then never reads its stream fills
// the HTTP/2 flow-control window; the send that cannot go out within the send
// deadline evicts the node (its stream ends, the node is treated as disconnected),
// and the reconcilers keep converging the other nodes meanwhile.
func TestSlowNodeIsEvicted(t *testing.T) {
	const sendTimeout = time.Second
	f := newFixtureWith(t, nil, 0, nodestream.New(2*time.Second, nodestream.WithSendTimeout(sendTimeout)))
	f.runReconcilers()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// A healthy gateway first, so the slow node (which has no external endpoint) is
	// made the source of a link to it and the link reconciler must visit it.
	fab := cpharness.NewFabric()
	t.Cleanup(fab.Close)
	start := func(group string) {
		t.Helper()
		n, err := fab.Start(cpharness.NodeConfig{Group: group, ID: "n1", Target: f.addr})
		if err != nil {
			t.Fatal(err)
		}
		if err := n.Controller().WaitRegistered(ctx); err != nil {
			t.Fatal(err)
		}
	}
	start("cloud")

	// The slow node: a raw stream with fixed (non-growing) 64 KiB windows, so a few
	// unread commands exhaust them.
	conn, err := grpc.NewClient(f.addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithInitialWindowSize(1<<16), grpc.WithInitialConnWindowSize(1<<16))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	stream, err := controllerv1.NewControllerServiceClient(conn).OpenControlChannel(ctx)
	if err != nil {
		t.Fatal(err)
	}
	slow := &node{t: t, stream: stream, cancel: cancel}
	slow.recv() // greeting
	reg := registerMsg("slow", "n1", "")
	reg.GetRegisterNodeRequest().GetConnectionDetails()[0].ExternalEndpoint = ""
	slow.send(reg)
	if r := slow.recv().GetRegisterNodeResponse(); !r.GetSuccess() {
		t.Fatalf("slow node not registered: %v", r)
	}
	// From here on the slow node reads nothing. The CP pushes large commands at it
	// until a send fails.
	sent := make(chan error, 1)
	go func() {
		for range 1000 {
			if err := f.streams.Send("slow/n1", bigCommand()); err != nil {
				sent <- err
				return
			}
		}
		sent <- errors.New("1000 commands of 32 KiB went out to a node that reads nothing")
	}()

	// Give the slow node time to tie up the link reconciler's single worker: it visits
	// the node on registration and asks again after each unanswered request.
	var sendErr error
	select {
	case sendErr = <-sent:
	case <-time.After(3 * time.Second):
	}

	// Another node joins now; its link must converge although the slow node misbehaved.
	start("edge")
	hctx, hcancel := context.WithTimeout(ctx, 15*time.Second)
	defer hcancel()
	err = cpharness.Eventually(hctx, func() error {
		links, err := f.st.ListLinks(ctx, store.LinkFilter{Group: "edge"})
		if err != nil || len(links) != 1 || links[0].Status != store.LinkApplied || links[0].DestNodeID == "" {
			return fmt.Errorf("cloud-edge link %+v, %v", links, err)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("healthy nodes did not converge while the slow node held the reconcilers: %v", err)
	}
	if sendErr == nil {
		select {
		case sendErr = <-sent:
		case <-time.After(15 * time.Second):
			t.Fatal("a send to a node that reads nothing is still blocked after 15s")
		}
	}
	if !errors.Is(sendErr, nodestream.ErrSendTimeout) {
		t.Fatalf("send to the slow node failed with %v, want ErrSendTimeout", sendErr)
	}
	wctx, wcancel := context.WithTimeout(ctx, 15*time.Second)
	defer wcancel()
	err = cpharness.Eventually(wctx, func() error {
		if f.streams.Connected("slow/n1") {
			return errors.New("slow node still has a stream")
		}
		if n, err := f.st.GetNode(ctx, "slow/n1"); err != nil || n.Connected {
			return errors.New("slow node not marked disconnected")
		}
		return cpharness.Converged(ctx, f.st, fab, false)
	})
	if err != nil {
		t.Fatalf("after the slow node's eviction: %v", err)
	}
	// The slow node's stream ended with a status that says why.
	ended := make(chan error, 1)
	go func() { ended <- slow.recvErr() }()
	select {
	case err := <-ended:
		wantStatus(t, err, codes.ResourceExhausted, "not reading")
	case <-time.After(10 * time.Second):
		t.Fatal("the evicted node's stream did not end")
	}
}
