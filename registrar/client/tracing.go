package client

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/switchboard-mesh/switchboard/endpoint"
	registrarv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/registrar/v1"
	"github.com/switchboard-mesh/switchboard/internal/tracing"
	"github.com/switchboard-mesh/switchboard/registry"
)

// Tracing (docs/operations.md, "Tracing"). With tracing on in the process:
//
//   - A write's call carries the trace context of the caller's context (the
//     agent's agent.apply span), through gRPC's stats handler (dial), so the
//     registrar's spans of the write are in the caller's trace.
//   - Every write the client remembers keeps its trace context; the re-send of
//     writes a failed replica lost (resend) runs under a registrar.client.resend
//     span: a child of the first traced write, linked to the others.
//   - A change event that carries a traceparent (the registrar's fan-out of a
//     traced write) is applied to the cache under a registrar.client.apply_event
//     span, a child of that fan-out: the watching agent's step of the write's
//     trace.
//
// With tracing off nothing of this runs: no stats handler is installed, and each
// step checks tracing.Enabled first.

var tracer = tracing.NewTracer("github.com/switchboard-mesh/switchboard/registrar/client")

// Span names.
const (
	spanApplyEvent = "registrar.client.apply_event"
	spanResend     = "registrar.client.resend"
)

// untracedMethods are the calls that get no client span: the watch streams,
// open for hours, whose events carry their own trace context.
var untracedMethods = []string{
	"/" + registrarv1.Registrar_ServiceDesc.ServiceName + "/WatchEndpoints",
	"/" + registrarv1.Registrar_ServiceDesc.ServiceName + "/WatchEndpointsScoped",
}

// writeTrace is the trace context of the caller's write, when it is traced and
// sampled: nil otherwise, and always while tracing is off.
func writeTrace(ctx context.Context) *trace.SpanContext {
	if !tracing.Enabled() {
		return nil
	}
	if sc := trace.SpanContextFromContext(ctx); sc.IsSampled() {
		return &sc
	}
	return nil
}

// tracedChange applies a change event that carries a traceparent under a span
// that continues the event's trace (a child of the registrar's fan-out span).
func (c *driver) tracedChange(ev *registrarv1.EndpointEvent) error {
	ctx, ok := tracing.ContextWithTraceparent(context.Background(), ev.GetTraceparent())
	if !ok {
		return c.change(ev) // not a traceparent we read: apply it untraced
	}
	attrs := []attribute.KeyValue{
		attribute.String("switchboard.event", ev.GetType().String()),
		attribute.String("switchboard.registrar.version", ev.GetVersion()),
		attribute.String("switchboard.node", c.opts.Node),
	}
	if e, err := endpoint.FromProtoUnchecked(ev.GetEndpoint()); err == nil {
		attrs = append(attrs, attribute.String("switchboard.endpoint.key", e.Key().String()))
	}
	_, span := tracer.Start(ctx, spanApplyEvent, trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(attrs...))
	err := c.change(ev)
	endSpan(span, err)
	return err
}

// traceResend starts the span of one re-send request of writes a replica lost,
// when any of them was traced: a child of the first traced write, linked to the
// others. ctx is unchanged otherwise.
func traceResend(ctx context.Context, group []ownRef) (context.Context, func(error)) {
	if !tracing.Enabled() {
		return ctx, func(error) {}
	}
	var scs []trace.SpanContext
	for _, r := range group {
		if r.w.trace != nil {
			scs = append(scs, *r.w.trace)
		}
	}
	pctx, links, ok := tracing.Batch(ctx, scs)
	if !ok {
		return ctx, func(error) {}
	}
	kind := "register"
	if group[0].w.op.Kind == registry.OpUnregister {
		kind = "unregister"
	}
	ctx, span := tracer.Start(pctx, spanResend, trace.WithLinks(links...), trace.WithAttributes(
		attribute.String("switchboard.op", kind), attribute.Int("switchboard.endpoints", len(group)), attribute.Int("switchboard.traced_writes", len(scs))))
	return ctx, func(err error) { endSpan(span, err) }
}

func endSpan(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}
