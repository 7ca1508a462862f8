package client_test

import (
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/switchboard-mesh/switchboard/internal/tracing"
	"github.com/switchboard-mesh/switchboard/registrar"
	"github.com/switchboard-mesh/switchboard/registrar/client"
	"github.com/switchboard-mesh/switchboard/registry"
	"github.com/switchboard-mesh/switchboard/registry/memory"
)

// With tracing on, a write through one client and its arrival at another are one
// trace: the writer's call is a child of the caller's span, and the watching
// client applies the event under a span whose parent is the registrar's fan-out
// span, the one whose context the event carried.
func TestTracingReachesTheWatchingClient(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	t.Cleanup(tracing.Use(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))))
	backend := memory.New()
	t.Cleanup(func() { backend.Close() })
	srv, _ := runServerAt(t, "127.0.0.1:0", registrar.Config{Cluster: "east", Backend: backend, BatchInterval: 20 * time.Millisecond})
	writer := newClient(t, client.Options{Addresses: []string{addr(srv)}, Node: "writer"})
	watcher := newClient(t, client.Options{Addresses: []string{addr(srv)}, Node: "watcher"})
	waitReady(t, writer)
	waitReady(t, watcher)

	ctx, root := tracing.NewTracer("test").Start(testCtx(t), "agent.apply")
	if err := writer.Apply(ctx, []registry.Op{registry.Register(ep("east", "web", "10.0.0.1", 80))}); err != nil {
		t.Fatal(err)
	}
	root.End()
	tid := root.SpanContext().TraceID()
	find := func(name, node string, kind trace.SpanKind) sdktrace.ReadOnlySpan {
		t.Helper()
		var found sdktrace.ReadOnlySpan
		eventually(t, 20*time.Second, name+" on "+node, func() bool {
			for _, s := range rec.Ended() {
				if s.Name() != name || s.SpanContext().TraceID() != tid || (kind != trace.SpanKindUnspecified && s.SpanKind() != kind) {
					continue
				}
				for _, a := range s.Attributes() {
					if node == "" || (a.Key == "switchboard.node" && a.Value.AsString() == node) {
						found = s
						return true
					}
				}
			}
			return false
		})
		return found
	}
	call := find("switchboard.registrar.v1.Registrar/RegisterEndpoint", "", trace.SpanKindClient)
	fanout := find("registrar.fanout", "", trace.SpanKindUnspecified)
	applied := find("registrar.client.apply_event", "watcher", trace.SpanKindConsumer)
	if call.Parent().SpanID() != root.SpanContext().SpanID() {
		t.Errorf("the write's call is a child of %s, want the caller's span %s", call.Parent().SpanID(), root.SpanContext().SpanID())
	}
	if applied.Parent().SpanID() != fanout.SpanContext().SpanID() || !applied.Parent().IsRemote() {
		t.Errorf("the watcher applied the event under %s, want the fan-out span %s (remote)", applied.Parent().SpanID(), fanout.SpanContext().SpanID())
	}
	// The watch streams are not traced: no span of them in any trace.
	for _, s := range rec.Ended() {
		if s.Name() == "switchboard.registrar.v1.Registrar/WatchEndpoints" {
			t.Errorf("the watch stream has a span: %v", s.Name())
		}
	}
}
