package southbound

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/switchboard-mesh/switchboard/controlplane"
	"github.com/switchboard-mesh/switchboard/controlplane/config"
	"github.com/switchboard-mesh/switchboard/controlplane/nodestream"
	"github.com/switchboard-mesh/switchboard/controlplane/store"
	"github.com/switchboard-mesh/switchboard/controlplane/store/memory"
	controllerv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/controller/v1"
	"github.com/switchboard-mesh/switchboard/nodeauth"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fixture is the southbound service over a real core service and store, served on a
// loopback socket.
type fixture struct {
	t       *testing.T
	svc     *controlplane.Service
	st      store.Store
	streams *nodestream.Handler
	conn    *grpc.ClientConn
	addr    string
	// logs holds what the service logged at warn level and above.
	logs *logBuffer

	mu       sync.Mutex
	queued   []controlplane.Result
	outcomes []string
	// onEnqueue, when set, also receives every result (the reconcilers' queues).
	onEnqueue func(controlplane.Result)
	// beforeSend, when set, sees every message the service sends a node, before
	// gRPC takes it.
	beforeSend func(*controllerv1.ControlMessage)
}

// hookedStream is a server stream whose sends pass the fixture's beforeSend.
type hookedStream struct {
	grpc.ServerStream
	f *fixture
}

func (h hookedStream) SendMsg(m any) error {
	h.f.mu.Lock()
	hook := h.f.beforeSend
	h.f.mu.Unlock()
	if msg, ok := m.(*controllerv1.ControlMessage); ok && hook != nil {
		hook(msg)
	}
	return h.ServerStream.SendMsg(m)
}

func newFixture(t *testing.T, a nodeauth.Authenticator, registerTimeout time.Duration) *fixture {
	t.Helper()
	return newFixtureWith(t, a, registerTimeout, nodestream.New(30*time.Second))
}

// newFixtureWith is newFixture over the given command handler.
func newFixtureWith(t *testing.T, a nodeauth.Authenticator, registerTimeout time.Duration, streams *nodestream.Handler) *fixture {
	t.Helper()
	return serveFixture(t, fixtureOptions{auth: a, registerTimeout: registerTimeout, streams: streams})
}

// fixtureOptions are what tests vary; zero values are newFixture's.
type fixtureOptions struct {
	auth            nodeauth.Authenticator
	registerTimeout time.Duration
	probeTimeout    time.Duration
	streams         *nodestream.Handler
	// creds secures the server; f.conn is then not made, and tests dial with f.dial.
	creds credentials.TransportCredentials
}

func serveFixture(t *testing.T, o fixtureOptions) *fixture {
	t.Helper()
	if o.streams == nil {
		o.streams = nodestream.New(30 * time.Second)
	}
	st := memory.New()
	topo, err := config.Parse([]byte("topology:\n  links:\n    - group: cloud\n      neighbors: ['*']\n"))
	if err != nil {
		t.Fatal(err)
	}
	svc, err := controlplane.New(context.Background(), controlplane.Options{Store: st, Topology: topo.Topology})
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{t: t, svc: svc, st: st, streams: o.streams, logs: &logBuffer{}}
	srv := New(Options{
		Service: svc, Streams: f.streams, Auth: o.auth, RegisterTimeout: o.registerTimeout, ProbeTimeout: o.probeTimeout, Logger: f.logs.logger(),
		Enqueue: func(r controlplane.Result) {
			f.mu.Lock()
			f.queued = append(f.queued, r)
			then := f.onEnqueue
			f.mu.Unlock()
			if then != nil {
				then(r)
			}
		},
		OnRegistration: func(o string) { f.mu.Lock(); f.outcomes = append(f.outcomes, o); f.mu.Unlock() },
	})
	var sopts []grpc.ServerOption
	if o.creds != nil {
		sopts = append(sopts, grpc.Creds(o.creds))
	}
	gs := grpc.NewServer(append(sopts, grpc.WaitForHandlers(true), grpc.StreamInterceptor(
		func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
			return handler(srv, hookedStream{ss, f})
		}))...)
	srv.Register(gs)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = gs.Serve(lis) }()
	f.addr = lis.Addr().String()
	t.Cleanup(func() {
		srv.Closing()
		gs.Stop()
	})
	if o.creds == nil {
		f.conn = f.dial("127.0.0.1", insecure.NewCredentials())
	}
	return f
}

// dial connects to the fixture from the local address ip (any of 127.0.0.0/8 on
// Linux, so that tests can show callers from different addresses).
func (f *fixture) dial(ip string, creds credentials.TransportCredentials) *grpc.ClientConn {
	f.t.Helper()
	local := &net.TCPAddr{IP: net.ParseIP(ip)}
	conn, err := grpc.NewClient(f.addr, grpc.WithTransportCredentials(creds),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			d := net.Dialer{LocalAddr: local}
			return d.DialContext(ctx, "tcp", addr)
		}))
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { conn.Close() })
	return conn
}

func (f *fixture) lastOutcome() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.outcomes) == 0 {
		return ""
	}
	return f.outcomes[len(f.outcomes)-1]
}

// node is a raw client stream, driven message by message.
type node struct {
	t      *testing.T
	stream grpc.BidiStreamingClient[controllerv1.ControlMessage, controllerv1.ControlMessage]
	cancel context.CancelFunc
}

// open starts a stream and reads the CP's greeting.
func (f *fixture) open() *node {
	f.t.Helper()
	return f.openOn(f.conn)
}

// openOn is open over conn.
func (f *fixture) openOn(conn *grpc.ClientConn) *node {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	f.t.Cleanup(cancel)
	stream, err := controllerv1.NewControllerServiceClient(conn).OpenControlChannel(ctx)
	if err != nil {
		f.t.Fatal(err)
	}
	n := &node{t: f.t, stream: stream, cancel: cancel}
	if greet := n.recv(); greet.GetAck() == nil || !greet.GetAck().GetSuccess() {
		f.t.Fatalf("first message from the CP is %v, want a successful Ack", greet)
	}
	return n
}

func (n *node) send(msg *controllerv1.ControlMessage) {
	n.t.Helper()
	if err := n.stream.Send(msg); err != nil {
		n.t.Fatal(err)
	}
}

func (n *node) recv() *controllerv1.ControlMessage {
	n.t.Helper()
	msg, err := n.stream.Recv()
	if err != nil {
		n.t.Fatalf("recv: %v", err)
	}
	return msg
}

// recvErr reads until the stream ends and returns its status.
func (n *node) recvErr() error {
	for {
		if _, err := n.stream.Recv(); err != nil {
			return err
		}
	}
}

func registerMsg(group, id, credentials string, links ...string) *controllerv1.ControlMessage {
	return &controllerv1.ControlMessage{MessageId: "reg-1", Payload: &controllerv1.ControlMessage_RegisterNodeRequest{
		RegisterNodeRequest: &controllerv1.RegisterNodeRequest{
			NodeId: id, GroupName: group, Credentials: credentials, Connections: links,
			ConnectionDetails: []*controllerv1.ConnectionDetails{{Endpoint: id + ":46357", ExternalEndpoint: "ext-" + id + ":443",
				Metadata: map[string]string{MetadataMTLSRequired: "true"}}},
		}}}
}

// register performs a successful handshake.
func (f *fixture) register(group, id, credentials string) *node {
	f.t.Helper()
	n := f.open()
	n.send(registerMsg(group, id, credentials))
	resp := n.recv()
	r := resp.GetRegisterNodeResponse()
	if r == nil || !r.GetSuccess() || r.GetNodeId() != controlplane.NodeID(group, id) || resp.GetReplyTo() != "reg-1" {
		f.t.Fatalf("registration answered with %v", resp)
	}
	return n
}

func wantStatus(t *testing.T, err error, code codes.Code, reason string) {
	t.Helper()
	if status.Code(err) != code || !strings.Contains(status.Convert(err).Message(), reason) {
		t.Fatalf("stream ended with %v, want %s containing %q", err, code, reason)
	}
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// logBuffer collects text log lines, safe for concurrent writers.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// logger writes warnings and errors to b.
func (b *logBuffer) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(b, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// lines returns the logged lines that contain every one of parts.
func (b *logBuffer) lines(parts ...string) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
next:
	for _, line := range strings.Split(b.buf.String(), "\n") {
		for _, p := range parts {
			if !strings.Contains(line, p) {
				continue next
			}
		}
		out = append(out, line)
	}
	return out
}
