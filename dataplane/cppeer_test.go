package dataplane_test

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	controllerv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/controller/v1"
)

// cpPeer is a scripted control plane: a real gRPC ControllerService on 127.0.0.1
// that greets, records every registration, accepts or rejects it as scripted, and
// hands each registered stream to the test to drive.
type cpPeer struct {
	controllerv1.UnimplementedControllerServiceServer
	t    testing.TB
	addr string

	mu      sync.Mutex
	srv     *grpc.Server
	regs    []*controllerv1.RegisterNodeRequest
	opened  int
	decide  func(n int, req *controllerv1.RegisterNodeRequest) error // nil = accept
	noDereg bool                                                     // ignore DeregisterNodeRequest
	streams chan *peerStream
}

func startPeer(t testing.TB) *cpPeer {
	t.Helper()
	p := &cpPeer{t: t, streams: make(chan *peerStream, 64)}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p.addr = lis.Addr().String()
	p.serve(lis)
	t.Cleanup(p.stop)
	return p
}

func (p *cpPeer) serve(lis net.Listener) {
	srv := grpc.NewServer()
	controllerv1.RegisterControllerServiceServer(srv, p)
	p.mu.Lock()
	p.srv = srv
	p.mu.Unlock()
	go srv.Serve(lis)
}

// stop kills the server and every stream, like a CP crash.
func (p *cpPeer) stop() {
	p.mu.Lock()
	srv := p.srv
	p.mu.Unlock()
	srv.Stop()
}

// restart serves again on the same address.
func (p *cpPeer) restart() {
	p.t.Helper()
	var lis net.Listener
	var err error
	for range 50 { // the old socket may linger for a moment
		if lis, err = net.Listen("tcp", p.addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		p.t.Fatalf("relisten %s: %v", p.addr, err)
	}
	p.serve(lis)
}

func (p *cpPeer) registrations() []*controllerv1.RegisterNodeRequest {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]*controllerv1.RegisterNodeRequest(nil), p.regs...)
}

func (p *cpPeer) streamsOpened() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.opened
}

// next waits for the next registered stream.
func (p *cpPeer) next(ctx context.Context) *peerStream {
	p.t.Helper()
	select {
	case s := <-p.streams:
		return s
	case <-ctx.Done():
		p.t.Fatalf("no registered stream: %v", ctx.Err())
		return nil
	}
}

func (p *cpPeer) OpenControlChannel(stream grpc.BidiStreamingServer[controllerv1.ControlMessage, controllerv1.ControlMessage]) error {
	p.mu.Lock()
	p.opened++
	p.mu.Unlock()
	if err := stream.Send(&controllerv1.ControlMessage{MessageId: "cp-hello",
		Payload: &controllerv1.ControlMessage_Ack{Ack: &controllerv1.Ack{Success: true}}}); err != nil {
		return err
	}
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	req := first.GetRegisterNodeRequest()
	if req == nil {
		return status.Error(codes.InvalidArgument, "first message must be RegisterNodeRequest")
	}
	p.mu.Lock()
	p.regs = append(p.regs, req)
	n, decide, noDereg := len(p.regs), p.decide, p.noDereg
	p.mu.Unlock()
	if decide != nil {
		if err := decide(n, req); err != nil {
			if _, ok := status.FromError(err); ok {
				return err
			}
			return stream.Send(&controllerv1.ControlMessage{MessageId: "cp-reg", ReplyTo: first.GetMessageId(),
				Payload: &controllerv1.ControlMessage_RegisterNodeResponse{RegisterNodeResponse: &controllerv1.RegisterNodeResponse{Error: err.Error()}}})
		}
	}
	ps := &peerStream{t: p.t, reg: req, stream: stream, in: make(chan *controllerv1.ControlMessage, 1024),
		drop: make(chan struct{}), done: make(chan struct{})}
	if err := ps.send(&controllerv1.ControlMessage{ReplyTo: first.GetMessageId(),
		Payload: &controllerv1.ControlMessage_RegisterNodeResponse{RegisterNodeResponse: &controllerv1.RegisterNodeResponse{
			Success: true, NodeId: req.GetGroupName() + "/" + req.GetNodeId()}}}); err != nil {
		return err
	}
	p.streams <- ps
	return ps.serve(noDereg)
}

// peerStream is one registered node stream as the test drives it.
type peerStream struct {
	t      testing.TB
	reg    *controllerv1.RegisterNodeRequest
	stream grpc.BidiStreamingServer[controllerv1.ControlMessage, controllerv1.ControlMessage]
	sendMu sync.Mutex
	seq    atomic.Uint64
	in     chan *controllerv1.ControlMessage
	drop   chan struct{}
	done   chan struct{}
}

// serve records what the node sends until the stream breaks or the test drops it.
func (ps *peerStream) serve(noDereg bool) error {
	defer close(ps.done)
	errc := make(chan error, 1)
	go func() {
		for {
			msg, err := ps.stream.Recv()
			if err != nil {
				errc <- err
				return
			}
			if d := msg.GetDeregisterNodeRequest(); d != nil && !noDereg {
				ps.in <- msg
				errc <- ps.send(&controllerv1.ControlMessage{ReplyTo: msg.GetMessageId(),
					Payload: &controllerv1.ControlMessage_DeregisterNodeResponse{DeregisterNodeResponse: &controllerv1.DeregisterNodeResponse{Success: true}}})
				return
			}
			ps.in <- msg
		}
	}()
	select {
	case err := <-errc:
		return err
	case <-ps.drop:
		return status.Error(codes.Unavailable, "dropped by test")
	}
}

func (ps *peerStream) send(msg *controllerv1.ControlMessage) error {
	ps.sendMu.Lock()
	defer ps.sendMu.Unlock()
	if msg.MessageId == "" {
		msg.MessageId = "cp-" + strconv.FormatUint(ps.seq.Add(1), 10)
	}
	return ps.stream.Send(msg)
}

// dropStream ends the stream from the CP side and waits for the handler to return.
func (ps *peerStream) dropStream(ctx context.Context) {
	close(ps.drop)
	select {
	case <-ps.done:
	case <-ctx.Done():
		ps.t.Fatal("stream handler did not return")
	}
}

// recv returns the next message from the node.
func (ps *peerStream) recv(ctx context.Context) *controllerv1.ControlMessage {
	ps.t.Helper()
	select {
	case m := <-ps.in:
		return m
	case <-ctx.Done():
		ps.t.Fatalf("nothing received from node: %v", ctx.Err())
		return nil
	}
}

// request sends payload and returns the reply to it; anything else received first is
// returned in others.
func (ps *peerStream) request(ctx context.Context, msg *controllerv1.ControlMessage) (reply *controllerv1.ControlMessage, others []*controllerv1.ControlMessage) {
	ps.t.Helper()
	msg.MessageId = "cp-req-" + strconv.FormatUint(ps.seq.Add(1), 10)
	if err := ps.send(msg); err != nil {
		ps.t.Fatalf("send: %v", err)
	}
	for {
		m := ps.recv(ctx)
		if m.GetReplyTo() == msg.MessageId {
			return m, others
		}
		others = append(others, m)
	}
}

func (ps *peerStream) command(ctx context.Context, cmd *controllerv1.ConfigCommand) *controllerv1.ConfigCommandAck {
	ps.t.Helper()
	reply, _ := ps.request(ctx, &controllerv1.ControlMessage{Payload: &controllerv1.ControlMessage_ConfigCommand{ConfigCommand: cmd}})
	ack := reply.GetConfigCommandAck()
	if ack == nil {
		ps.t.Fatalf("reply to ConfigCommand is %T", reply.GetPayload())
	}
	return ack
}

func (ps *peerStream) connections(ctx context.Context) []*controllerv1.ConnectionEntry {
	ps.t.Helper()
	reply, _ := ps.request(ctx, &controllerv1.ControlMessage{Payload: &controllerv1.ControlMessage_ConnectionListRequest{ConnectionListRequest: &controllerv1.ConnectionListRequest{}}})
	return reply.GetConnectionListResponse().GetEntries()
}

func (ps *peerStream) subscriptions(ctx context.Context) []*controllerv1.Subscription {
	ps.t.Helper()
	reply, _ := ps.request(ctx, &controllerv1.ControlMessage{Payload: &controllerv1.ControlMessage_SubscriptionListRequest{SubscriptionListRequest: &controllerv1.SubscriptionListRequest{}}})
	return reply.GetSubscriptionListResponse().GetSubscriptions()
}

// reject is a decide func that refuses the first n registrations.
func rejectFirst(n int, withStatus bool) func(int, *controllerv1.RegisterNodeRequest) error {
	return func(i int, _ *controllerv1.RegisterNodeRequest) error {
		if i > n {
			return nil
		}
		if withStatus {
			return status.Errorf(codes.PermissionDenied, "attempt %d denied", i)
		}
		return fmt.Errorf("attempt %d refused", i)
	}
}
