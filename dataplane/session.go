package dataplane

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"

	controllerv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/controller/v1"
	"github.com/switchboard-mesh/switchboard/nodeauth"
)

type controlStream = grpc.BidiStreamingClient[controllerv1.ControlMessage, controllerv1.ControlMessage]

// session is one stream to the CP, from open to break.
type session struct {
	c      *Controller
	ctx    context.Context
	cancel context.CancelFunc
	stream controlStream

	sendMu sync.Mutex
	work   chan *controllerv1.ControlMessage

	regResp   chan *controllerv1.RegisterNodeResponse
	deregResp chan *controllerv1.DeregisterNodeResponse
	regID     string
	effective string // node id the CP answered with

	registered atomic.Bool
	recvDone   chan struct{}
	recvErr    error // set before recvDone closes
}

// workQueueLen bounds commands received but not yet applied; a full queue stops the
// receive loop, which pushes back on the CP through gRPC flow control.
const workQueueLen = 256

// errStreamEnded is the receive error when the CP closed the stream cleanly.
var errStreamEnded = errors.New("control-plane stream ended")

// runSession is one connect attempt: reset, token, open, register, replay, serve.
// It reports whether the CP accepted the registration.
func (c *Controller) runSession(ctx context.Context) (bool, error) {
	c.resetState()
	c.mu.Lock()
	c.stats.Attempts++
	c.mu.Unlock()
	token, err := c.token(ctx)
	if err != nil {
		return false, err
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	client, err := c.sessionClient()
	if err != nil {
		return false, err
	}
	stream, err := client.OpenControlChannel(sctx)
	if err != nil {
		return false, fmt.Errorf("open control channel: %w", err)
	}
	s := &session{
		c: c, ctx: sctx, cancel: cancel, stream: stream,
		work:      make(chan *controllerv1.ControlMessage, workQueueLen),
		regResp:   make(chan *controllerv1.RegisterNodeResponse, 1),
		deregResp: make(chan *controllerv1.DeregisterNodeResponse, 1),
		recvDone:  make(chan struct{}),
	}
	if !c.setSession(s) {
		return false, errors.New("node is leaving")
	}
	var wg sync.WaitGroup
	wg.Go(s.recvLoop)
	wg.Go(s.workLoop)
	err = s.serve(token)
	cancel()
	wg.Wait()
	c.clearSession(s)
	return s.registered.Load(), err
}

// token fetches credentials; a failure aborts the attempt before anything is sent,
// as the spec requires (never register with empty credentials by accident).
func (c *Controller) token(ctx context.Context) (string, error) {
	tctx, cancel := context.WithTimeout(ctx, c.cfg.RegisterTimeout)
	defer cancel()
	tok, err := c.cfg.Tokens.Token(tctx, c.cfg.Group, c.cfg.NodeID)
	if err != nil {
		c.mu.Lock()
		c.stats.TokenFailures++
		c.mu.Unlock()
		return "", fmt.Errorf("registration aborted: %w", err)
	}
	return tok, nil
}

// setSession installs s as current unless the node is leaving; checked under mu so
// that Deregister either sees s or stops it from starting.
func (c *Controller) setSession(s *session) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.isLeaving() {
		return false
	}
	c.sess = s
	return true
}

// clearSession forgets s and fails everything still waiting on it.
func (c *Controller) clearSession(s *session) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.sess == s {
		c.sess = nil
	}
	if s.registered.Load() {
		c.regCh = make(chan struct{})
	}
	c.state.drainPending()
}

// serve registers, replays notifications and waits for the stream to end.
func (s *session) serve(token string) error {
	if err := s.register(token); err != nil {
		return err
	}
	s.c.markRegistered(s)
	s.c.flushNotifications(s)
	select {
	case <-s.recvDone:
		return s.recvErr
	case <-s.ctx.Done():
		return s.ctx.Err()
	}
}

func (s *session) register(token string) error {
	c := s.c
	s.regID = c.newMsgID()
	req := &controllerv1.RegisterNodeRequest{
		NodeId:            c.cfg.NodeID,
		GroupName:         c.cfg.Group,
		Credentials:       token,
		ConnectionDetails: detailsToProto(c.cfg.Details),
		Connections:       c.liveLinkIDs(),
	}
	msg := &controllerv1.ControlMessage{MessageId: s.regID,
		Payload: &controllerv1.ControlMessage_RegisterNodeRequest{RegisterNodeRequest: req}}
	// io.EOF: the CP ended the stream already (a standby refuses it as it opens);
	// why, with a standby's leader hint, is what the receive loop gets.
	if err := s.send(msg); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("send registration: %w", err)
	}
	t := time.NewTimer(c.cfg.RegisterTimeout)
	defer t.Stop()
	select {
	case resp := <-s.regResp:
		if !resp.GetSuccess() {
			return fmt.Errorf("registration rejected: %s", resp.GetError())
		}
		s.effective = resp.GetNodeId()
		return nil
	case <-s.recvDone:
		return fmt.Errorf("stream ended before registration was acknowledged: %w", s.recvErr)
	case <-t.C:
		return fmt.Errorf("no registration response within %s", c.cfg.RegisterTimeout)
	case <-s.ctx.Done():
		return s.ctx.Err()
	}
}

func (c *Controller) markRegistered(s *session) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s.registered.Store(true)
	c.stats.Registrations++
	close(c.regCh)
	c.cfg.Logger.Info("registered with control plane", "node", c.nodeLabel(), "effective_id", s.effective)
}

func (s *session) send(msg *controllerv1.ControlMessage) error {
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	return s.stream.Send(msg)
}

func (s *session) recvLoop() {
	defer close(s.recvDone)
	for {
		msg, err := s.stream.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = errStreamEnded
			}
			s.recvErr = err
			return
		}
		if !s.dispatch(msg) {
			s.recvErr = s.ctx.Err()
			return
		}
	}
}

// dispatch routes one message from the CP; false when the session is over.
func (s *session) dispatch(msg *controllerv1.ControlMessage) bool {
	switch p := msg.GetPayload().(type) {
	case *controllerv1.ControlMessage_Ack:
		// The CP's greeting; nothing to do.
	case *controllerv1.ControlMessage_RegisterNodeResponse:
		offer(s.regResp, p.RegisterNodeResponse)
	case *controllerv1.ControlMessage_DeregisterNodeResponse:
		offer(s.deregResp, p.DeregisterNodeResponse)
	case *controllerv1.ControlMessage_ConfigCommand,
		*controllerv1.ControlMessage_ConnectionListRequest,
		*controllerv1.ControlMessage_SubscriptionListRequest:
		select {
		case s.work <- msg:
		case <-s.ctx.Done():
			return false
		}
	case *controllerv1.ControlMessage_ConfigCommandAck:
		s.logAck(msg.GetReplyTo(), p.ConfigCommandAck)
	default:
		s.c.cfg.Logger.Warn("unexpected message from control plane", "node", s.c.nodeLabel(), "type", fmt.Sprintf("%T", p))
	}
	return true
}

// logAck reports the CP's answer to an announcement or claim; failures are the CP's
// to retry on, but an operator wants to see them.
func (s *session) logAck(replyTo string, ack *controllerv1.ConfigCommandAck) {
	for _, st := range ack.GetSubscriptionsStatus() {
		if !st.GetSuccess() {
			s.c.cfg.Logger.Warn("control plane refused announcement", "node", s.c.nodeLabel(), "reply_to", replyTo, "error", st.GetError())
		}
	}
	for _, st := range ack.GetConnectionsStatus() {
		if !st.GetSuccess() {
			s.c.cfg.Logger.Warn("control plane refused link claim", "node", s.c.nodeLabel(), "link", st.GetLinkId(), "error", st.GetError())
		}
	}
}

func offer[T any](ch chan T, v T) {
	select {
	case ch <- v:
	default:
	}
}

// workLoop applies commands one at a time, in arrival order. Subscription acks are
// awaited asynchronously, so a slow datapath ack never holds up later commands.
func (s *session) workLoop() {
	for {
		select {
		case <-s.ctx.Done():
			return
		case msg := <-s.work:
			s.c.handle(s, msg)
		}
	}
}

func (s *session) deregister(ctx context.Context) error {
	id := s.effective
	if id == "" {
		id = nodeauth.Identity(s.c.cfg.Group, s.c.cfg.NodeID)
	}
	msg := &controllerv1.ControlMessage{MessageId: s.c.newMsgID(),
		Payload: &controllerv1.ControlMessage_DeregisterNodeRequest{
			DeregisterNodeRequest: &controllerv1.DeregisterNodeRequest{NodeId: id}}}
	if err := s.send(msg); err != nil && !errors.Is(err, io.EOF) { // io.EOF: as in register
		return fmt.Errorf("send deregistration: %w", err)
	}
	select {
	case resp := <-s.deregResp:
		return deregResult(resp)
	case <-s.recvDone:
		// The CP answers and then closes the stream; the answer may be queued.
		select {
		case resp := <-s.deregResp:
			return deregResult(resp)
		default:
			return fmt.Errorf("stream ended before deregistration response: %w", s.recvErr)
		}
	case <-ctx.Done():
		return fmt.Errorf("waiting for deregistration response: %w", ctx.Err())
	}
}

func deregResult(resp *controllerv1.DeregisterNodeResponse) error {
	if !resp.GetSuccess() {
		return errors.New("control plane refused deregistration")
	}
	return nil
}

func detailsToProto(ds []ConnectionDetails) []*controllerv1.ConnectionDetails {
	out := make([]*controllerv1.ConnectionDetails, 0, len(ds))
	for _, d := range ds {
		out = append(out, &controllerv1.ConnectionDetails{
			Endpoint: d.Endpoint, ExternalEndpoint: d.ExternalEndpoint, Metadata: d.Metadata,
		})
	}
	return out
}
