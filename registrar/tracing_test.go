package registrar

import (
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/switchboard-mesh/switchboard/endpoint"
	registrarv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/registrar/v1"
	"github.com/switchboard-mesh/switchboard/internal/tracing"
	"github.com/switchboard-mesh/switchboard/internal/wire"
	"github.com/switchboard-mesh/switchboard/registry/memory"
)

// recordSpans turns tracing on for the test with a provider that keeps every
// span; it must run before the server starts, which takes its stats handler then.
func recordSpans(t *testing.T) *tracetest.SpanRecorder {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(tracing.Use(tp))
	return rec
}

// tracedClient is a client of ts whose calls carry the trace context of their
// context, as an agent's do with tracing on.
func tracedClient(t *testing.T, ts *testServer) registrarv1.RegistrarClient {
	t.Helper()
	conn, err := grpc.NewClient(ts.Addr().String(), append(tracing.DialOptions(), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return registrarv1.NewRegistrarClient(conn)
}

// spanNamed waits until a span named name has ended in trace tid and returns it.
func spanNamed(t *testing.T, rec *tracetest.SpanRecorder, tid trace.TraceID, name string) sdktrace.ReadOnlySpan {
	t.Helper()
	return spanOfKind(t, rec, tid, name, trace.SpanKindUnspecified)
}

// spanOfKind is spanNamed for a span of kind (SpanKindUnspecified: any).
func spanOfKind(t *testing.T, rec *tracetest.SpanRecorder, tid trace.TraceID, name string, kind trace.SpanKind) sdktrace.ReadOnlySpan {
	t.Helper()
	var found sdktrace.ReadOnlySpan
	eventually(t, "span "+name, func() bool {
		for _, s := range rec.Ended() {
			if s.Name() == name && s.SpanContext().TraceID() == tid && (kind == trace.SpanKindUnspecified || s.SpanKind() == kind) {
				found = s
				return true
			}
		}
		return false
	})
	return found
}

func isChild(t *testing.T, child, parent sdktrace.ReadOnlySpan) {
	t.Helper()
	if child.Parent().SpanID() != parent.SpanContext().SpanID() || child.SpanContext().TraceID() != parent.SpanContext().TraceID() {
		t.Errorf("%s (parent %s) is not a child of %s (%s)", child.Name(), child.Parent().SpanID(), parent.Name(), parent.SpanContext().SpanID())
	}
}

// One registration is one trace: the caller's span, the call's client and server
// spans, the accept, the fan-out of its change (whose context the event carries
// to the watcher) and the batch that persists it with its backend write.
func TestTracingFollowsARegistration(t *testing.T) {
	rec := recordSpans(t)
	ts := startServer(t, Config{BatchInterval: 20 * time.Millisecond})
	w := openWatch(t, ts.client, "")
	w.untilComplete(t)
	ctx, root := tracing.NewTracer("test").Start(testCtx(t), "agent.apply")
	if _, err := tracedClient(t, ts).RegisterEndpoint(ctx, &registrarv1.RegisterEndpointRequest{Endpoints: protos(ep("east", "web", "10.0.0.1", 80))}); err != nil {
		t.Fatal(err)
	}
	root.End()
	ev := w.next(t)
	tid := root.SpanContext().TraceID()
	carried, ok := tracing.ParseTraceparent(ev.GetTraceparent())
	if ev.GetType() != registrarv1.EndpointEvent_ENDPOINT_ADDED || !ok || carried.TraceID() != tid || !carried.IsSampled() {
		t.Fatalf("event %v: want an ADDED carrying a sampled traceparent of trace %s", ev, tid)
	}
	const rpc = "switchboard.registrar.v1.Registrar/RegisterEndpoint"
	client := spanOfKind(t, rec, tid, rpc, trace.SpanKindClient)
	server := spanOfKind(t, rec, tid, rpc, trace.SpanKindServer)
	accept := spanNamed(t, rec, tid, spanAccept)
	fanout := spanNamed(t, rec, tid, spanFanout)
	batch := spanNamed(t, rec, tid, spanWriteBatch)
	apply := spanNamed(t, rec, tid, spanBackendApply)
	isChild(t, client, rootSpan(t, rec, root))
	isChild(t, server, client)
	isChild(t, accept, server)
	isChild(t, fanout, accept)
	isChild(t, batch, accept)
	isChild(t, apply, batch)
	if carried.SpanID() != fanout.SpanContext().SpanID() {
		t.Errorf("the event carries span %s, the fan-out span is %s", carried.SpanID(), fanout.SpanContext().SpanID())
	}
	if len(batch.Links()) != 0 {
		t.Errorf("a batch of one traced write has links: %v", batch.Links())
	}
	if got := attr(apply, attrBackend); got != "memory" {
		t.Errorf("backend_apply names backend %q, want memory", got)
	}
}

func rootSpan(t *testing.T, rec *tracetest.SpanRecorder, root trace.Span) sdktrace.ReadOnlySpan {
	t.Helper()
	for _, s := range rec.Ended() {
		if s.SpanContext().SpanID() == root.SpanContext().SpanID() {
			return s
		}
	}
	t.Fatal("root span not recorded")
	return nil
}

// attr is the value of span s's string attribute k, "" if it has none.
func attr(s sdktrace.ReadOnlySpan, k attribute.Key) string {
	for _, kv := range s.Attributes() {
		if kv.Key == k {
			return kv.Value.String()
		}
	}
	return ""
}

// A batch that persists the writes of several traced requests is a child of the
// first and links to the others, each once.
func TestWriteBatchLinksTheOtherTracedWrites(t *testing.T) {
	rec := recordSpans(t)
	ts := startServer(t, Config{BatchInterval: time.Hour, BatchSize: 4})
	c := tracedClient(t, ts)
	var roots []trace.Span
	for i, addr := range []string{"10.0.0.1", "10.0.0.2", "10.0.0.3"} {
		ctx, root := tracing.NewTracer("test").Start(testCtx(t), "agent.apply")
		eps := protos(ep("east", "web", addr, 80))
		if i == 1 { // a request of two writes is linked once
			eps = protos(ep("east", "web", addr, 80), ep("east", "web", addr, 81))
		}
		if _, err := c.RegisterEndpoint(ctx, &registrarv1.RegisterEndpointRequest{Endpoints: eps}); err != nil {
			t.Fatal(err)
		}
		root.End()
		roots = append(roots, root)
	}
	// Four writes wait now: a full batch.
	batch := spanNamed(t, rec, roots[0].SpanContext().TraceID(), spanWriteBatch)
	accept := spanNamed(t, rec, roots[0].SpanContext().TraceID(), spanAccept)
	isChild(t, batch, accept)
	links := batch.Links()
	if len(links) != 2 {
		t.Fatalf("batch links %v: want the accepts of the 2 other requests", links)
	}
	for i, l := range links {
		other := spanNamed(t, rec, roots[i+1].SpanContext().TraceID(), spanAccept)
		if l.SpanContext.SpanID() != other.SpanContext().SpanID() {
			t.Errorf("link %d is to %s, want request %d's accept %s", i, l.SpanContext.SpanID(), i+1, other.SpanContext().SpanID())
		}
	}
}

// Off, the registrar adds nothing to its events, even for a call that carries
// trace context; on, a write whose trace is not sampled adds nothing either.
func TestNoTraceparentUnlessTracedAndSampled(t *testing.T) {
	for _, c := range []struct {
		name    string
		on      bool
		sampled string
	}{
		{"tracing off", false, "01"},
		{"not sampled", true, "00"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var rec *tracetest.SpanRecorder
			if c.on {
				rec = recordSpans(t)
			} else if tracing.Enabled() {
				t.Fatal("tracing is on")
			}
			ts := startServer(t, Config{BatchInterval: 10 * time.Millisecond})
			w := openWatch(t, ts.client, "")
			w.untilComplete(t)
			ctx := metadata.AppendToOutgoingContext(testCtx(t), "traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-"+c.sampled)
			if _, err := ts.client.RegisterEndpoint(ctx, &registrarv1.RegisterEndpointRequest{Endpoints: protos(ep("east", "web", "10.0.0.1", 80))}); err != nil {
				t.Fatal(err)
			}
			ev := w.next(t)
			if ev.GetTraceparent() != "" {
				t.Fatalf("event carries traceparent %q", ev.GetTraceparent())
			}
			b, err := proto.Marshal(ev)
			if err != nil {
				t.Fatal(err)
			}
			for len(b) > 0 {
				num, typ, n := protowire.ConsumeTag(b)
				if num == wire.EventFieldTrace {
					t.Fatal("event has a traceparent field")
				}
				b = b[n:]
				b = b[protowire.ConsumeFieldValue(num, typ, b):]
			}
			if rec != nil {
				time.Sleep(100 * time.Millisecond) // the batch has been written
				for _, s := range rec.Ended() {
					t.Errorf("span %s recorded for an unsampled trace", s.Name())
				}
			}
		})
	}
}

// A batch persists the writes to a key since the last batch as one op; it is in
// the traces of all of them (a child of the first, linked to the rest), and so is
// the batch that writes them again after a failure.
func TestWriteBatchLinksCoalescedAndRetriedWrites(t *testing.T) {
	rec := recordSpans(t)
	mem := memory.New()
	t.Cleanup(func() { mem.Close() })
	f := &faulty{Registry: mem}
	f.failApply.Store(true)
	ts := startServer(t, Config{Backend: f, BatchInterval: time.Hour, BatchSize: 2})
	c := tracedClient(t, ts)
	a, b := ep("east", "web", "10.0.0.1", 80), ep("east", "web", "10.0.0.2", 80)
	var roots []trace.Span
	for i, e := range []endpoint.Endpoint{a, a, b} { // a, a again (coalesced), then b: a full batch
		e.Weight = i + 1
		ctx, root := tracing.NewTracer("test").Start(testCtx(t), "agent.apply")
		if _, err := c.RegisterEndpoint(ctx, &registrarv1.RegisterEndpointRequest{Endpoints: protos(e)}); err != nil {
			t.Fatal(err)
		}
		root.End()
		roots = append(roots, root)
	}
	eventually(t, "the first batch failed", func() bool { return f.failed.Load() > 0 })
	f.failApply.Store(false)
	eventually(t, "the batch retried and persisted", func() bool { return ts.Registrar().Pending() == 0 })
	first := roots[0].SpanContext().TraceID()
	accepts := make([]sdktrace.ReadOnlySpan, len(roots))
	for i, r := range roots {
		accepts[i] = spanNamed(t, rec, r.SpanContext().TraceID(), spanAccept)
	}
	var failedBatch, okBatch sdktrace.ReadOnlySpan
	eventually(t, "both batch spans", func() bool {
		for _, s := range rec.Ended() {
			if s.Name() != spanWriteBatch || s.SpanContext().TraceID() != first {
				continue
			}
			if s.Status().Code == codes.Error {
				failedBatch = s
			} else {
				okBatch = s
			}
		}
		return failedBatch != nil && okBatch != nil
	})
	for _, batch := range []sdktrace.ReadOnlySpan{failedBatch, okBatch} {
		isChild(t, batch, accepts[0])
		links := batch.Links()
		if len(links) != 2 || links[0].SpanContext.SpanID() != accepts[1].SpanContext().SpanID() || links[1].SpanContext.SpanID() != accepts[2].SpanContext().SpanID() {
			t.Errorf("batch (%v) links %v: want the coalesced rewrite's accept, then the other key's", batch.Status().Code, links)
		}
	}
}
