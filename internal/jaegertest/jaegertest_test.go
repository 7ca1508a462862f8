package jaegertest

import (
	"context"
	"regexp"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// TestJaegerStoresWhatItIsSent: spans exported over OTLP/gRPC come back from the
// query API with their service, parents, kinds, attributes and links, as the
// tracing tests read them.
func TestJaegerStoresWhatItIsSent(t *testing.T) {
	j := Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	exp, err := otlptracegrpc.New(ctx, otlptracegrpc.WithEndpointURL(j.Endpoint()))
	if err != nil {
		t.Fatal(err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp, sdktrace.WithBatchTimeout(10*time.Millisecond)),
		sdktrace.WithResource(resource.NewSchemaless(attribute.String("service.name", "jaegertest"))))
	tr := tp.Tracer("jaegertest")
	_, other := tr.Start(ctx, "other")
	other.End()
	rctx, root := tr.Start(ctx, "root")
	_, child := tr.Start(rctx, "child", trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(attribute.String("k", "v")), trace.WithLinks(trace.Link{SpanContext: other.SpanContext()}))
	child.End()
	root.End()
	if err := tp.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	var got Trace
	deadline := time.Now().Add(30 * time.Second)
	for {
		got, err = j.Trace(ctx, root.SpanContext().TraceID().String())
		if err == nil && len(got.Spans) == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("trace not stored within 30s: %+v, %v", got, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	r, ok1 := got.Span("jaegertest", "root")
	c, ok2 := got.Span("jaegertest", "child")
	if !ok1 || !ok2 {
		t.Fatalf("spans %+v: want root and child of service jaegertest", got.Spans)
	}
	if r.ParentID != "" || c.ParentID != root.SpanContext().SpanID().String() || c.Kind != "server" || r.Kind != "internal" || c.Tags["k"] != "v" {
		t.Fatalf("root %+v\nchild %+v: want child a server span of root with k=v", r, c)
	}
	if len(c.Links) != 1 || c.Links[0].Type != "FOLLOWS_FROM" || c.Links[0].SpanID != other.SpanContext().SpanID().String() || c.Links[0].TraceID != other.SpanContext().TraceID().String() {
		t.Fatalf("child's links %+v: want the other trace's span", c.Links)
	}
	services, err := j.Services(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(services) != 1 || services[0] != "jaegertest" {
		t.Fatalf("services %v", services)
	}
	traces, err := j.Traces(ctx, "jaegertest", 10)
	if err != nil || len(traces) != 2 {
		t.Fatalf("traces of jaegertest: %d (%v), want 2", len(traces), err)
	}
}

// TestToolsModulePinsVersion keeps Version, which names the cached binary, in step
// with the module that builds it; it needs no Jaeger, so the main suite runs it.
func TestToolsModulePinsVersion(t *testing.T) {
	b, err := tool.GoMod()
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`(?m)^\s*github\.com/jaegertracing/jaeger (v\S+)`)
	m := re.FindSubmatch(b)
	if m == nil {
		t.Fatalf("%s/go.mod does not require github.com/jaegertracing/jaeger", toolsModule)
	}
	if string(m[1]) != Version {
		t.Fatalf("%s/go.mod pins jaeger %s, jaegertest.Version is %s: change both together", toolsModule, m[1], Version)
	}
	if !regexp.MustCompile(`(?m)^tool github\.com/jaegertracing/jaeger/cmd/jaeger$`).Match(b) {
		t.Fatalf("%s/go.mod has no tool directive for github.com/jaegertracing/jaeger/cmd/jaeger", toolsModule)
	}
}
