package node

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	nodev1 "github.com/switchboard-mesh/switchboard/gen/switchboard/node/v1"
)

// The client API on the framed transport: NodeService's methods and messages, as on
// gRPC, each call on a connection of its own. A framed connection whose LinkOpen names
// a method (mdMethod) calls it; one that names none opens a link. The handlers are
// gRPC's generated ones, so both transports run the same code, with the same checks.
//
// It exists for latency: on gRPC a message published at one node and delivered at
// another is handed between goroutines twice more than on NATS (gRPC's reader hands a
// publish to the stream's handler, and a subscriber's sender hands its delivery to
// gRPC's writer), and each hand-over to a parked goroutine is a wake-up the host may
// deliver late. Here the handler reads the connection itself and the sender writes it
// itself (docs/dataplane.md).

// mdMethod is the LinkOpen header that names the client API method a framed
// connection calls ("/switchboard.node.v1.NodeService/Subscribe").
const mdMethod = "sb-method"

// clientStreams and clientUnary are NodeService's methods by full name.
var clientStreams, clientUnary = func() (map[string]grpc.StreamDesc, map[string]grpc.MethodDesc) {
	sd := nodev1.NodeService_ServiceDesc
	streams, unary := map[string]grpc.StreamDesc{}, map[string]grpc.MethodDesc{}
	for _, d := range sd.Streams {
		streams["/"+sd.ServiceName+"/"+d.StreamName] = d
	}
	for _, d := range sd.Methods {
		unary["/"+sd.ServiceName+"/"+d.MethodName] = d
	}
	return streams, unary
}()

// serveCall serves one call of the client API on an accepted framed connection: it
// answers the LinkOpen, runs the method's handler, and returns the call's status.
func (n *Node) serveCall(ctx context.Context, f *framed, method string) error {
	sd, isStream := clientStreams[method]
	ud, isUnary := clientUnary[method]
	if !isStream && !isUnary {
		return status.Errorf(codes.Unimplemented, "unknown method %s", method)
	}
	if err := n.checkClient(ctx, method); err != nil {
		return err
	}
	if err := f.writeStatus(status.New(codes.OK, "")); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.WithValue(ctx, framedKey{}, f))
	defer cancel()
	go n.endCall(ctx, cancel, f)
	cs := &callStream{f: f, ctx: ctx, watch: !isStream || !sd.ClientStreams}
	srv := clientServer{n: n}
	if isStream {
		return sd.Handler(srv, cs)
	}
	resp, err := ud.Handler(srv, ctx, cs.RecvMsg, nil)
	if err != nil {
		return err
	}
	return f.SendMsg(resp)
}

// framedKey is the context key of a call's framed connection.
type framedKey struct{}

// framedOf is the framed connection a call of ctx runs on (nil: it runs on gRPC).
func framedOf(ctx context.Context) *framed {
	f, _ := ctx.Value(framedKey{}).(*framed)
	return f
}

// endCall ends a call's context when its connection fails or closes, as gRPC ends a
// stream's when the client resets it, and ends the connection when the node stops:
// with UNAVAILABLE on a graceful stop, without a word after Kill.
func (n *Node) endCall(ctx context.Context, cancel context.CancelFunc, f *framed) {
	select {
	case <-f.stop:
		cancel()
	case <-ctx.Done():
		if n.ctx.Err() == nil {
			return // the call returned
		}
		if !n.killed.Load() {
			_ = f.nc.SetWriteDeadline(time.Now().Add(time.Second))
			_ = f.writeStatus(status.Newf(codes.Unavailable, "node %s is stopping", n.id))
		}
		f.close()
	}
}

// callStream is a call's grpc.ServerStream on its framed connection. Headers and
// trailers are not carried: no method of the API sets any.
type callStream struct {
	f   *framed
	ctx context.Context
	// watch: the call has one request; once it is read, watchEnd reads on.
	watch bool
}

func (s *callStream) SetHeader(metadata.MD) error  { return nil }
func (s *callStream) SendHeader(metadata.MD) error { return nil }
func (s *callStream) SetTrailer(metadata.MD)       {}
func (s *callStream) Context() context.Context     { return s.ctx }
func (s *callStream) SendMsg(m any) error          { return s.f.SendMsg(m) }

func (s *callStream) RecvMsg(m any) error {
	err := s.f.RecvMsg(m)
	if err == nil && s.watch {
		s.watch = false
		go s.watchEnd()
	}
	return err
}

// watchEnd reads what follows a call's only request (the client's end frame and
// pings) until the connection ends, so that a client that goes away ends the call
// (readFrame closes the connection on any failure, and endCall cancels the call).
func (s *callStream) watchEnd() {
	for {
		kind, buf, err := s.f.readFrame()
		sharedPool.Put(buf)
		switch {
		case err != nil:
			return
		case kind != framePing && kind != frameEnd:
			s.f.close() // a second request, or a frame a client does not send
			return
		}
	}
}

// FramedOptions configure a FramedClient.
type FramedOptions struct {
	// TLS is the client's TLS configuration (nil: plaintext); its ALPN protocol is
	// set to the framed transport's.
	TLS *tls.Config
	// MaxMessageBytes is the node's limits.max_message_bytes, which bounds the
	// frames the client reads (DefaultMaxMessageBytes when 0).
	MaxMessageBytes int
	// KeepaliveInterval and KeepaliveTimeout are the connections' keepalive, as a
	// link's (DefaultKeepaliveInterval and DefaultKeepaliveTimeout when 0).
	KeepaliveInterval, KeepaliveTimeout time.Duration
	// DialTimeout bounds opening a call's connection (10 s when 0).
	DialTimeout time.Duration
}

// FramedClient calls the node's client API on the framed transport. It is a
// grpc.ClientConnInterface: nodev1.NewNodeServiceClient(NewFramedClient(addr, o))
// serves the same methods as on gRPC, and NewRequester takes it too. Each call,
// stream or unary, opens a connection of its own and closes it when the call ends, so
// it suits long-lived streams (PublishStream, Subscribe, RequestStream,
// RespondStream); a unary call pays a connection (and a TLS handshake) each. Call
// options are ignored, and no headers or trailers come back.
type FramedClient struct {
	addr string
	o    FramedOptions
}

// NewFramedClient returns a client of the node listening at addr ("host:port").
func NewFramedClient(addr string, o FramedOptions) *FramedClient {
	if o.MaxMessageBytes <= 0 {
		o.MaxMessageBytes = DefaultMaxMessageBytes
	}
	if o.KeepaliveInterval <= 0 {
		o.KeepaliveInterval = DefaultKeepaliveInterval
	}
	if o.KeepaliveTimeout <= 0 {
		o.KeepaliveTimeout = DefaultKeepaliveTimeout
	}
	if o.DialTimeout <= 0 {
		o.DialTimeout = openTimeout
	}
	return &FramedClient{addr: addr, o: o}
}

// Close does nothing: each call closes its own connection when it ends. It lets a
// FramedClient stand where a *grpc.ClientConn is closed.
func (c *FramedClient) Close() error { return nil }

// Invoke makes a unary call.
func (c *FramedClient) Invoke(ctx context.Context, method string, args, reply any, _ ...grpc.CallOption) error {
	s, err := c.NewStream(ctx, &grpc.StreamDesc{}, method)
	if err != nil {
		return err
	}
	if err := s.SendMsg(args); err != nil {
		return err
	}
	_ = s.CloseSend()
	return s.RecvMsg(reply)
}

// NewStream opens a call's connection and returns once the node accepted the call
// (an unknown method or a refused client fails here, not at the first RecvMsg).
// Cancelling ctx ends the call.
func (c *FramedClient) NewStream(ctx context.Context, desc *grpc.StreamDesc, method string, _ ...grpc.CallOption) (grpc.ClientStream, error) {
	dctx, cancel := context.WithTimeout(ctx, c.o.DialTimeout)
	defer cancel()
	f, _, err := dialFramed(dctx, c.addr, c.o.TLS, msgLimitFor(c.o.MaxMessageBytes))
	if err != nil {
		if ctx.Err() != nil {
			return nil, status.FromContextError(ctx.Err()).Err()
		}
		return nil, status.Errorf(codes.Unavailable, "node %s: %v", c.addr, err)
	}
	md, _ := metadata.FromOutgoingContext(ctx)
	md = md.Copy()
	md.Set(mdMethod, method)
	md.Set(mdKeepalive, c.o.KeepaliveInterval.String()+"/"+c.o.KeepaliveTimeout.String())
	if err := f.open(md); err != nil {
		f.close()
		return nil, err
	}
	_ = f.nc.SetDeadline(time.Time{})
	f.keepalive(c.o.KeepaliveInterval, c.o.KeepaliveTimeout)
	return &framedCall{f: f, ctx: ctx, single: !desc.ServerStreams, stop: context.AfterFunc(ctx, f.close)}, nil
}

// framedCall is a call's grpc.ClientStream.
type framedCall struct {
	f   *framed
	ctx context.Context
	// single: the call has one response; the connection closes once it is read.
	single bool
	stop   func() bool
}

func (c *framedCall) Header() (metadata.MD, error) { return nil, nil }
func (c *framedCall) Trailer() metadata.MD         { return nil }
func (c *framedCall) Context() context.Context     { return c.ctx }
func (c *framedCall) CloseSend() error             { return c.f.CloseSend() }

func (c *framedCall) SendMsg(m any) error { return c.err(c.f.SendMsg(m)) }

// RecvMsg reads the next response; io.EOF once the call ended with OK. The call's
// connection closes when the call ends.
func (c *framedCall) RecvMsg(m any) error {
	err := c.f.RecvMsg(m)
	if err != nil || c.single {
		c.stop()
		c.f.close()
	}
	if c.single && errors.Is(err, io.EOF) {
		return status.Error(codes.Internal, "the node ended the call without a response")
	}
	return c.err(err)
}

// err is what a call's failure is to its caller: the context's status once the
// caller cancelled (the connection's end is its consequence).
func (c *framedCall) err(err error) error {
	if err != nil && !errors.Is(err, io.EOF) && c.ctx.Err() != nil {
		return status.FromContextError(c.ctx.Err()).Err()
	}
	return err
}
