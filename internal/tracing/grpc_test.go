package tracing

import (
	"context"
	"net"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
)

// record turns tracing on for the test with a provider that keeps every span.
func record(t *testing.T) *tracetest.SpanRecorder {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(Use(tp))
	return rec
}

// echoHealth answers health checks and notes the metadata of each.
type echoHealth struct {
	*health.Server
	md chan metadata.MD
}

func (h echoHealth) Check(ctx context.Context, req *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	h.md <- md
	return h.Server.Check(ctx, req)
}

func serve(t *testing.T, sopts []grpc.ServerOption, dopts []grpc.DialOption) (*grpc.ClientConn, chan metadata.MD) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer(sopts...)
	h := echoHealth{Server: health.NewServer(), md: make(chan metadata.MD, 1)}
	// Registered under another name too, so that one of its methods is traced.
	desc := healthpb.Health_ServiceDesc
	desc.ServiceName = "test.Traced"
	s.RegisterService(&desc, h)
	healthpb.RegisterHealthServer(s, h)
	go func() { _ = s.Serve(ln) }()
	t.Cleanup(s.Stop)
	conn, err := grpc.NewClient(ln.Addr().String(), append(dopts, grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn, h.md
}

// With tracing on, a call gets a client span and a server span, the server's a
// child of the client's, with the trace context in the call's metadata; health
// checks get none.
func TestCallsCarryTraceContext(t *testing.T) {
	rec := record(t)
	conn, mds := serve(t, ServerOptions(), DialOptions())
	ctx, root := NewTracer("test").Start(context.Background(), "root")
	// The health service under the traced name: /test.Traced/Check.
	if err := conn.Invoke(ctx, "/test.Traced/Check", &healthpb.HealthCheckRequest{}, &healthpb.HealthCheckResponse{}); err != nil {
		t.Fatal(err)
	}
	md := <-mds
	root.End()
	if len(md.Get("traceparent")) != 1 {
		t.Fatalf("call metadata %v: no traceparent", md)
	}
	if _, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatal(err)
	}
	<-mds
	// The server ends its span after the client has its answer.
	deadline := time.Now().Add(10 * time.Second)
	for len(rec.Ended()) < 3 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond) // and no more come
	spans := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range rec.Ended() {
		spans[s.Name()+"/"+s.SpanKind().String()] = s
	}
	cl, sv := spans["test.Traced/Check/client"], spans["test.Traced/Check/server"]
	if cl == nil || sv == nil || len(spans) != 3 {
		t.Fatalf("spans %v: want root, and a client and a server span of the traced call only", keys(spans))
	}
	if cl.Parent().SpanID() != root.SpanContext().SpanID() || sv.Parent().SpanID() != cl.SpanContext().SpanID() ||
		sv.SpanContext().TraceID() != root.SpanContext().TraceID() || !sv.Parent().IsRemote() {
		t.Fatalf("root %v → client %v (parent %v) → server %v (parent %v): not one chain", root.SpanContext().SpanID(),
			cl.SpanContext().SpanID(), cl.Parent().SpanID(), sv.SpanContext().SpanID(), sv.Parent().SpanID())
	}
}

// Off, the options are empty and a call carries no trace context, even from a
// context that holds a span.
func TestOffAddsNothing(t *testing.T) {
	if ServerOptions() != nil || DialOptions() != nil {
		t.Fatal("options while tracing is off")
	}
	conn, mds := serve(t, ServerOptions(), DialOptions())
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{1}, TraceFlags: trace.FlagsSampled})
	ctx := trace.ContextWithSpanContext(context.Background(), sc)
	if err := conn.Invoke(ctx, "/test.Traced/Check", &healthpb.HealthCheckRequest{}, &healthpb.HealthCheckResponse{}); err != nil {
		t.Fatal(err)
	}
	if md := <-mds; len(md.Get("traceparent")) != 0 {
		t.Fatalf("traceparent sent with tracing off: %v", md)
	}
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
