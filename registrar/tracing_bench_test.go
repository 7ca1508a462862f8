package registrar

import (
	"context"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/switchboard-mesh/switchboard/internal/tracing"
)

// BenchmarkRegisterFanoutTraced is BenchmarkRegisterFanout with tracing on and
// every registration sampled: a root span per call, the call's client and server
// spans, the accept, the fan-out and the batches, queued to a batch span processor
// whose exporter discards them. What tracing costs when it is on, for comparison
// (off, BenchmarkRegisterFanout).
func BenchmarkRegisterFanoutTraced(b *testing.B) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter()))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	restore := tracing.Use(tp)
	defer restore()
	root := tracing.NewTracer("bench")
	benchRegisterFanout(b, tracing.DialOptions(), func() context.Context {
		ctx, span := root.Start(context.Background(), "agent.apply")
		span.End() // ended at once: only its context matters here
		return ctx
	})
}
