package southbound

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/switchboard-mesh/switchboard/controlplane"
	"github.com/switchboard-mesh/switchboard/controlplane/nodestream"
	"github.com/switchboard-mesh/switchboard/controlplane/store"
	controllerv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/controller/v1"
	"github.com/switchboard-mesh/switchboard/nodeauth"
)

// DefaultRegisterTimeout bounds the wait for a stream's RegisterNodeRequest.
const DefaultRegisterTimeout = 15 * time.Second

// Registration outcomes passed to Options.OnRegistration.
const (
	OutcomeAccepted = "accepted"
	OutcomeDenied   = "denied"
	OutcomeInvalid  = "invalid"
	OutcomeTimeout  = "timeout"
	// OutcomeRefused: the node id is held by a live session of another identity.
	OutcomeRefused = "refused"
)

// MetadataMTLSRequired is the ConnectionDetails metadata key by which a node says that
// clients of its external endpoint must present a certificate ("true").
const MetadataMTLSRequired = "mtls_required"

// Options configure the service.
type Options struct {
	Service *controlplane.Service
	Streams *nodestream.Handler
	// Auth verifies registrations; nil accepts every node (nodeauth.Noop).
	Auth nodeauth.Authenticator
	// Enqueue hands the outcome of every event to the reconcilers.
	Enqueue func(controlplane.Result)
	// RegisterTimeout bounds the handshake; DefaultRegisterTimeout when zero.
	RegisterTimeout time.Duration
	// ProbeTimeout bounds the wait for a live session's answer when a caller that does
	// not prove the same identity claims its node id; DefaultProbeTimeout when zero.
	ProbeTimeout time.Duration
	// OnRegistration observes each handshake's outcome (metrics); may be nil.
	OnRegistration func(outcome string)
	Logger         *slog.Logger
}

// Server implements controllerv1.ControllerServiceServer.
type Server struct {
	controllerv1.UnimplementedControllerServiceServer
	o       Options
	closing atomic.Bool
	claims  nodeLocks

	mu       sync.Mutex
	sessions map[string]*session // the registered session of each node id
}

type controlStream = grpc.BidiStreamingServer[controllerv1.ControlMessage, controllerv1.ControlMessage]

// New returns the service; Register it on a grpc.Server.
func New(o Options) *Server {
	if o.Auth == nil {
		o.Auth = nodeauth.Noop{}
	}
	if o.RegisterTimeout <= 0 {
		o.RegisterTimeout = DefaultRegisterTimeout
	}
	if o.ProbeTimeout <= 0 {
		o.ProbeTimeout = DefaultProbeTimeout
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Enqueue == nil {
		o.Enqueue = func(controlplane.Result) {}
	}
	if o.OnRegistration == nil {
		o.OnRegistration = func(string) {}
	}
	return &Server{o: o, sessions: map[string]*session{}}
}

// Register adds the service to gs.
func (s *Server) Register(gs *grpc.Server) { controllerv1.RegisterControllerServiceServer(gs, s) }

// Closing tells the service the control plane is shutting down: streams that end from
// now on are not node crashes, so no failover runs for them.
func (s *Server) Closing() { s.closing.Store(true) }

// OpenControlChannel serves one node's stream from handshake to end.
func (s *Server) OpenControlChannel(stream controlStream) error {
	if err := stream.Send(&controllerv1.ControlMessage{MessageId: newID(),
		Payload: &controllerv1.ControlMessage_Ack{Ack: &controllerv1.Ack{Success: true}}}); err != nil {
		return err
	}
	first, err := s.awaitRegistration(stream)
	if err != nil {
		return err
	}
	sess, err := s.register(stream, first)
	if err != nil {
		return err
	}
	return s.serve(stream, sess)
}

// session is a registered stream.
type session struct {
	nodeID string
	id     uint64
	st     *nodestream.Stream
	peer   string // the node's address, for logs
	who    holder // what the node proved when it registered
}

func peerAddr(ctx context.Context) string {
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		return p.Addr.String()
	}
	return ""
}

// awaitRegistration returns the first message, which must be a RegisterNodeRequest
// and must come within the timeout.
func (s *Server) awaitRegistration(stream controlStream) (*controllerv1.ControlMessage, error) {
	type recv struct {
		msg *controllerv1.ControlMessage
		err error
	}
	ch := make(chan recv, 1)
	// Owned by this handler: when it returns, gRPC cancels the stream and Recv ends.
	go func() {
		m, err := stream.Recv()
		ch <- recv{m, err}
	}()
	t := time.NewTimer(s.o.RegisterTimeout)
	defer t.Stop()
	select {
	case r := <-ch:
		if r.err != nil {
			return nil, r.err
		}
		if r.msg.GetRegisterNodeRequest() == nil {
			s.o.OnRegistration(OutcomeInvalid)
			return nil, status.Errorf(codes.FailedPrecondition,
				"the first message on the control channel must be a RegisterNodeRequest, got %T", r.msg.GetPayload())
		}
		return r.msg, nil
	case <-t.C:
		s.o.OnRegistration(OutcomeTimeout)
		return nil, status.Errorf(codes.DeadlineExceeded, "no RegisterNodeRequest within %s", s.o.RegisterTimeout)
	case <-stream.Context().Done():
		return nil, status.FromContextError(stream.Context().Err()).Err()
	}
}

// register verifies the node's credentials, then saves it, hands its stream to the
// command handler, answers, and queues the reconcilers. Nothing is saved for a node
// that is denied, or refused because another identity's live session holds its id.
func (s *Server) register(stream controlStream, msg *controllerv1.ControlMessage) (*session, error) {
	ctx := stream.Context()
	req := msg.GetRegisterNodeRequest()
	nodeID := controlplane.NodeID(req.GetGroupName(), req.GetNodeId())
	proven, err := nodeauth.VerifyIdentity(ctx, s.o.Auth, req.GetCredentials(), req.GetGroupName(), req.GetNodeId())
	if err != nil {
		s.o.OnRegistration(OutcomeDenied)
		s.o.Logger.Warn("registration denied", "node", nodeID, "peer", peerAddr(ctx), "reason", err)
		return nil, status.Errorf(codes.PermissionDenied, "registration of %q denied: %v", nodeID, err)
	}
	sess, res, err := s.claim(ctx, stream, nodeID, req, callerOf(ctx, proven))
	if err != nil {
		return nil, err
	}
	err = sess.st.Send(&controllerv1.ControlMessage{ReplyTo: msg.GetMessageId(),
		Payload: &controllerv1.ControlMessage_RegisterNodeResponse{RegisterNodeResponse: &controllerv1.RegisterNodeResponse{
			Success: true, NodeId: sess.nodeID,
		}}})
	if err != nil {
		select {
		case <-sess.st.Done():
			// Closed by the command handler while answering (a newer stream of the
			// node id registered, even before the answer went out): the RPC ends
			// with the status that says why, as it does once registered.
			return nil, s.closedByHandler(ctx, sess)
		default:
		}
		s.ended(ctx, sess, err)
		return nil, err
	}
	s.o.OnRegistration(OutcomeAccepted)
	s.o.Logger.Info("node connected", "node", sess.nodeID, "session", sess.id, "connections", len(req.GetConnections()))
	s.o.Enqueue(res)
	return sess, nil
}

// claim takes the node id for caller — unless a live session of another identity
// holds it — saves the registration and installs the stream, all under the node
// id's lock. The lock is released before the answer is sent: a newer registration
// of the node may then replace this one at once.
func (s *Server) claim(ctx context.Context, stream controlStream, nodeID string, req *controllerv1.RegisterNodeRequest,
	caller holder) (*session, controlplane.Result, error) {
	unlock, err := s.claims.lock(ctx, nodeID)
	if err != nil {
		return nil, controlplane.Result{}, status.FromContextError(err).Err()
	}
	defer unlock()
	replaced, err := s.admit(ctx, nodeID, caller)
	if err != nil {
		s.o.OnRegistration(OutcomeRefused)
		return nil, controlplane.Result{}, err
	}
	reg, err := s.o.Service.NodeRegistered(ctx, registration(req))
	if err != nil {
		s.o.OnRegistration(OutcomeInvalid)
		return nil, controlplane.Result{}, toStatus(fmt.Errorf("register %q: %w", nodeID, err))
	}
	sess := &session{nodeID: reg.NodeID, id: reg.Session, peer: caller.peer, who: caller}
	sess.st = s.o.Streams.Add(reg.NodeID, stream.Send)
	s.track(sess)
	if replaced != nil {
		s.logReplaced(sess, replaced)
	}
	return sess, reg.Result, nil
}

// registration converts the request for the core.
func registration(req *controllerv1.RegisterNodeRequest) controlplane.Registration {
	reg := controlplane.Registration{NodeID: req.GetNodeId(), Group: req.GetGroupName()}
	for _, cd := range req.GetConnectionDetails() {
		reg.ConnDetails = append(reg.ConnDetails, store.ConnectionDetails{
			Endpoint: cd.GetEndpoint(), ExternalEndpoint: cd.GetExternalEndpoint(),
			MTLSRequired: cd.GetMetadata()[MetadataMTLSRequired] == "true",
		})
	}
	for _, link := range req.GetConnections() {
		reg.Connections = append(reg.Connections, controlplane.ConnectionReport{LinkID: link, Alive: true})
	}
	return reg
}

// serve is the message loop, until deregistration, the end of the stream, or the
// command handler closing the stream (replaced or evicted). Recv runs on its own
// goroutine because only returning from the handler ends a gRPC stream: the loop
// must be able to stop while Recv waits.
func (s *Server) serve(stream controlStream, sess *session) error {
	ctx := stream.Context()
	msgs := make(chan *controllerv1.ControlMessage)
	recvErr := make(chan error, 1)
	quit := make(chan struct{})
	defer close(quit)
	// Owned by this handler: Recv fails at the latest when the handler returns and
	// gRPC ends the stream, and a message nobody takes any more is dropped on quit.
	go func() {
		for {
			msg, err := stream.Recv()
			if err != nil {
				recvErr <- err
				return
			}
			select {
			case msgs <- msg:
			case <-quit:
				return
			}
		}
	}()
	for {
		select {
		case err := <-recvErr:
			s.ended(ctx, sess, err)
			return nil
		case <-sess.st.Done():
			return s.closedByHandler(ctx, sess)
		case msg := <-msgs:
			if msg.GetDeregisterNodeRequest() != nil {
				return s.deregister(ctx, sess, msg)
			}
			s.handle(ctx, sess, msg)
		}
	}
}

func (s *Server) handle(ctx context.Context, sess *session, msg *controllerv1.ControlMessage) {
	if cmd := msg.GetConfigCommand(); cmd != nil && msg.GetReplyTo() == "" {
		s.nodeCommand(ctx, sess, msg.GetMessageId(), cmd)
		return
	}
	if msg.GetReplyTo() != "" {
		if !sess.st.Deliver(msg) {
			s.o.Logger.Debug("response nobody waits for", "node", sess.nodeID, "reply_to", msg.GetReplyTo())
		}
		return
	}
	s.o.Logger.Warn("unexpected message on control channel", "node", sess.nodeID, "type", fmt.Sprintf("%T", msg.GetPayload()))
}

// closedByHandler ends the RPC of a stream the command handler closed, with a status
// that tells the process on the other end why, so it stops believing it is
// registered:
//   - replaced by a newer stream of the same node: ABORTED. The newer registration
//     won a conflict over the node id; the loser may retry (the data-plane
//     controller reconnects with backoff), which is what ABORTED asks of a client.
//     ALREADY_EXISTS would describe a refused newcomer, not an existing stream that
//     was taken over.
//   - evicted for not reading within the send deadline: RESOURCE_EXHAUSTED, as for
//     any consumer whose buffer stayed full. The node is disconnected like a crash
//     (failover, route cleanup) and rebuilt when it registers again.
func (s *Server) closedByHandler(ctx context.Context, sess *session) error {
	cause := sess.st.Err()
	s.ended(ctx, sess, cause)
	switch {
	case errors.Is(cause, nodestream.ErrReplaced):
		s.o.Logger.Warn("control stream replaced by a newer connection of the same node id; if this repeats, "+
			"two processes use the same node id", "node", sess.nodeID, "session", sess.id, "peer", sess.peer,
			"identity", sess.who.identity())
		return status.Errorf(codes.Aborted, "node %s (session %d): replaced by a newer connection of the same node id; "+
			"if this repeats, another process uses this node id", sess.nodeID, sess.id)
	case errors.Is(cause, nodestream.ErrRevoked):
		s.o.Logger.Warn("node disconnected: its registration was revoked", "node", sess.nodeID,
			"session", sess.id, "peer", sess.peer, "err", cause)
		return status.Errorf(codes.PermissionDenied, "node %s: %v", sess.nodeID, cause)
	case errors.Is(cause, nodestream.ErrSendTimeout):
		s.o.Logger.Warn("node evicted: it is not reading its control stream", "node", sess.nodeID,
			"session", sess.id, "peer", sess.peer, "err", cause)
		return status.Errorf(codes.ResourceExhausted, "node %s: not reading its control stream, disconnected: %v",
			sess.nodeID, cause)
	}
	return status.Errorf(codes.Unavailable, "node %s: control stream closed: %v", sess.nodeID, cause)
}

// deregister answers first — once the stream is removed nothing can be sent on it —
// then removes the stream and runs the departure.
func (s *Server) deregister(ctx context.Context, sess *session, msg *controllerv1.ControlMessage) error {
	err := sess.st.Send(&controllerv1.ControlMessage{ReplyTo: msg.GetMessageId(),
		Payload: &controllerv1.ControlMessage_DeregisterNodeResponse{DeregisterNodeResponse: &controllerv1.DeregisterNodeResponse{Success: true}}})
	if err != nil {
		s.o.Logger.Debug("deregistration response not sent", "node", sess.nodeID, "err", err)
	}
	s.forget(sess)
	s.o.Streams.Remove(sess.st)
	res, err := s.o.Service.NodeDeregistered(context.WithoutCancel(ctx), sess.nodeID, sess.id)
	if err != nil {
		s.o.Logger.Warn("deregistration not applied", "node", sess.nodeID, "err", err)
		return nil
	}
	s.o.Logger.Info("node deregistered", "node", sess.nodeID)
	s.o.Enqueue(res)
	return nil
}

// ended handles a stream that broke without deregistration: the stream goes first, so
// waiters fail at once, then the crash is recorded — unless a newer stream of the node
// replaced this one, or the control plane itself is stopping.
func (s *Server) ended(ctx context.Context, sess *session, cause error) {
	s.forget(sess)
	current := s.o.Streams.Remove(sess.st)
	if !current || s.closing.Load() {
		return
	}
	res, err := s.o.Service.NodeDisconnected(context.WithoutCancel(ctx), sess.nodeID, sess.id)
	if errors.Is(err, controlplane.ErrStaleSession) {
		return
	}
	if err != nil {
		s.o.Logger.Warn("disconnect not applied", "node", sess.nodeID, "err", err)
		return
	}
	s.o.Logger.Info("node disconnected", "node", sess.nodeID, "cause", cause)
	s.o.Enqueue(res)
}

// toStatus maps the core's errors to gRPC codes.
func toStatus(err error) error {
	code := codes.Internal
	switch {
	case errors.Is(err, controlplane.ErrInvalidArgument), errors.Is(err, store.ErrInvalidName):
		code = codes.InvalidArgument
	case errors.Is(err, controlplane.ErrClaimRejected), errors.Is(err, controlplane.ErrStaleSession):
		code = codes.FailedPrecondition
	case errors.Is(err, store.ErrNotFound):
		code = codes.NotFound
	case errors.Is(err, store.ErrClosed):
		code = codes.Unavailable
	case errors.Is(err, context.Canceled):
		code = codes.Canceled
	}
	return status.Error(code, err.Error())
}
