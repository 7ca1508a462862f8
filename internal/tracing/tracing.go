package tracing

import (
	"context"
	"sync/atomic"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// on is the tracing of this process; nil while tracing is off.
type on struct {
	tp   trace.TracerProvider
	prop propagation.TextMapPropagator
}

var current atomic.Pointer[on]

// Enabled reports whether tracing is on in this process. It is the cheap check that
// guards every span a component would start.
func Enabled() bool { return current.Load() != nil }

// propagator carries W3C trace context (traceparent, tracestate) and baggage.
var propagator = propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})

// Use turns tracing on with tp and returns a function that restores what was in
// effect before. Setup calls it; tests call it with a provider that records spans.
// It does not change OpenTelemetry's global provider.
func Use(tp trace.TracerProvider) (restore func()) {
	prev := current.Swap(&on{tp: tp, prop: propagator})
	return func() { current.Store(prev) }
}

// Tracer starts spans of one instrumentation scope (conventionally the package's
// import path) with whatever provider is in effect when a span starts. Make one per
// package, as a package variable; call Start only when Enabled.
type Tracer struct {
	scope string
	cache atomic.Pointer[cachedTracer]
}

type cachedTracer struct {
	owner *on
	t     trace.Tracer
}

// NewTracer returns a Tracer for scope.
func NewTracer(scope string) *Tracer { return &Tracer{scope: scope} }

// Start starts a span, as trace.Tracer's Start does; while tracing is off it
// returns ctx and a span that records nothing.
func (t *Tracer) Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	o := current.Load()
	if o == nil {
		return ctx, noop.Span{}
	}
	c := t.cache.Load()
	if c == nil || c.owner != o {
		c = &cachedTracer{owner: o, t: o.tp.Tracer(t.scope)}
		t.cache.Store(c)
	}
	return c.t.Start(ctx, name, opts...)
}
