package client

import (
	"context"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/switchboard-mesh/switchboard/endpoint"
	"github.com/switchboard-mesh/switchboard/internal/tracing"
	"github.com/switchboard-mesh/switchboard/registrar/token"
	"github.com/switchboard-mesh/switchboard/registry"
)

// Writes a failed replica lost are re-sent under one span per request: a child of
// the first traced write, linked to the other traced ones; untraced writes add
// nothing.
func TestResendContinuesTheWritesTraces(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	t.Cleanup(tracing.Use(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))))
	e := func(addr string) endpoint.Endpoint {
		return endpoint.Endpoint{Cluster: "east", Service: "web", Protocol: "http", Address: addr, Port: 80, Priority: 1}
	}
	tr := func(n byte) *trace.SpanContext {
		sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{n}, SpanID: trace.SpanID{n}, TraceFlags: trace.FlagsSampled})
		return &sc
	}
	c := newCache(time.Now)
	c.replace(map[endpoint.Key]endpoint.Endpoint{}, token.Version{Epoch: 1, Seq: 5, Digest: 7, HasDigest: true}, token.Version{Epoch: 1}, 0)
	c.wroteTraced([]registry.Op{registry.Register(e("10.0.0.1"))}, token.Version{Epoch: 1, Seq: 6}, tr(1))
	c.wrote([]registry.Op{registry.Register(e("10.0.0.2"))}, token.Version{Epoch: 1, Seq: 7})
	c.wroteTraced([]registry.Op{registry.Register(e("10.0.0.3")), registry.Register(e("10.0.0.4"))}, token.Version{Epoch: 1, Seq: 8}, tr(3))
	lost := c.replace(map[endpoint.Key]endpoint.Endpoint{}, token.Version{Epoch: 2, Seq: 1, Digest: 1, HasDigest: true}, token.Version{Epoch: 2}, 0)
	if len(lost) != 4 {
		t.Fatalf("%d writes to re-send, want 4", len(lost))
	}
	// The cache hands them back in no particular order; the request is in the
	// order resendOnce sends it.
	group := requests(lost, func(r ownRef) registry.Op { return r.w.op })[0]
	var first, other *trace.SpanContext
	for _, r := range group {
		if r.w.trace != nil && first == nil {
			first = r.w.trace
		} else if r.w.trace != nil && !r.w.trace.Equal(*first) {
			other = r.w.trace
		}
	}
	ctx, end := traceResend(context.Background(), group)
	if got := trace.SpanContextFromContext(ctx); got.TraceID() != first.TraceID() {
		t.Fatalf("the re-send runs in trace %s, want the first traced write's, %s", got.TraceID(), first.TraceID())
	}
	end(nil)
	spans := rec.Ended()
	if len(spans) != 1 || spans[0].Name() != spanResend || spans[0].Parent().SpanID() != first.SpanID() {
		t.Fatalf("spans %v: want one %s, a child of %s", spans, spanResend, first.SpanID())
	}
	if l := spans[0].Links(); len(l) != 1 || !l[0].SpanContext.Equal(*other) {
		t.Fatalf("links %v: want the other traced write's, %v, once", l, other)
	}
}

// With tracing off no write keeps a trace, and a re-send starts no span.
func TestNoTraceKeptWhileTracingIsOff(t *testing.T) {
	if tracing.Enabled() {
		t.Fatal("tracing is on")
	}
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{1}, TraceFlags: trace.FlagsSampled})
	if writeTrace(trace.ContextWithSpanContext(context.Background(), sc)) != nil {
		t.Fatal("a trace is kept while tracing is off")
	}
	ctx := context.Background()
	if got, _ := traceResend(ctx, []ownRef{{w: &ownWrite{trace: &sc}}}); got != ctx {
		t.Fatal("a re-send is traced while tracing is off")
	}
}
