package registrar

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/switchboard-mesh/switchboard/endpoint"
	registrarv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/registrar/v1"
	"github.com/switchboard-mesh/switchboard/internal/tracing"
	"github.com/switchboard-mesh/switchboard/internal/wire"
	"github.com/switchboard-mesh/switchboard/registrar/internal/view"
	"github.com/switchboard-mesh/switchboard/registrar/token"
	"github.com/switchboard-mesh/switchboard/registry"
)

// Tracing (docs/operations.md, "Tracing"). With tracing on, a write request is
// one trace from the agent that sent it to every agent that watches its change:
//
//	RegisterEndpoint / UnregisterEndpoint   the call's server span (otelgrpc)
//	└─ registrar.accept                     validated, authorized, taken into the snapshot
//	   ├─ registrar.fanout                  one per change event the write caused; its
//	   │  │                                 context travels on the event (traceparent)
//	   │  └─ registrar.client.apply_event   in each watching agent (registrar/client)
//	   └─ registrar.write_batch             the write-behind batch that persists it: a child
//	      │                                 of its first traced write, linked to the others
//	      └─ registrar.backend_apply        the batch's one backend Apply
//
// With tracing off no span is started and nothing is added to an event: every
// step checks a nil origin or tracing.Enabled first.

// tracer starts the registrar's spans.
var tracer = tracing.NewTracer("github.com/switchboard-mesh/switchboard/registrar")

// Span names.
const (
	spanAccept       = "registrar.accept"
	spanFanout       = "registrar.fanout"
	spanWriteBatch   = "registrar.write_batch"
	spanBackendApply = "registrar.backend_apply"
)

// Attribute keys of the registrar's spans.
const (
	attrOp        = attribute.Key("switchboard.op")
	attrEndpoints = attribute.Key("switchboard.endpoints")
	attrKeys      = attribute.Key("switchboard.endpoint.keys")
	attrKey       = attribute.Key("switchboard.endpoint.key")
	attrEvent     = attribute.Key("switchboard.event")
	attrVersion   = attribute.Key("switchboard.registrar.version")
	attrTraced    = attribute.Key("switchboard.traced_writes")
	attrBackend   = attribute.Key("switchboard.backend")
)

// untracedMethods are the registrar's calls that get no server span: a watch stream
// is open for hours, and each of its events carries its own trace context.
var untracedMethods = []string{
	"/" + registrarv1.Registrar_ServiceDesc.ServiceName + "/WatchEndpoints",
	"/" + registrarv1.Registrar_ServiceDesc.ServiceName + "/WatchEndpointsScoped",
}

// maxKeyAttrs bounds the endpoint keys a span lists: a request may hold 10,000.
const maxKeyAttrs = 16

// writeTrace is the trace of an accepted write request: its accept span's context.
// Only a sampled write has one; its ops keep it (as a view.Trace) until a batch
// persists them.
type writeTrace struct{ sc trace.SpanContext }

// traceAccept starts the accept span of a write request under ctx (the call's
// server span). tr is nil unless the span is sampled; end ends the span with the
// outcome. Call it only when tracing is on.
func traceAccept(ctx context.Context, ops []registry.Op) (_ context.Context, tr *writeTrace, end func(token.Version, error)) {
	kind := "register"
	if len(ops) > 0 && ops[0].Kind == registry.OpUnregister {
		kind = "unregister"
	}
	ctx, span := tracer.Start(ctx, spanAccept, trace.WithAttributes(attrOp.String(kind), attrEndpoints.Int(len(ops)), keysAttr(ops)))
	if sc := span.SpanContext(); sc.IsSampled() {
		tr = &writeTrace{sc: sc}
	}
	return ctx, tr, func(v token.Version, err error) {
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		} else {
			span.SetAttributes(attrVersion.String(v.String()))
		}
		span.End()
	}
}

// keysAttr lists the first maxKeyAttrs keys of ops.
func keysAttr(ops []registry.Op) attribute.KeyValue {
	keys := make([]string, 0, min(len(ops), maxKeyAttrs))
	for _, op := range ops[:min(len(ops), maxKeyAttrs)] {
		keys = append(keys, op.Endpoint.Key().String())
	}
	return attrKeys.StringSlice(keys)
}

// Fanout records the fan-out of change t of key k at version v, caused by the write
// traced as tr, which the view is accepting: a short span, a child of the write's
// accept span, whose context the event carries to every watcher. It returns that
// context as a traceparent. The view calls it under its lock.
func (tr *writeTrace) Fanout(t wire.EventType, k endpoint.Key, v token.Version) string {
	ctx := trace.ContextWithSpanContext(context.Background(), tr.sc)
	_, span := tracer.Start(ctx, spanFanout, trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(attrEvent.String(registrarv1.EndpointEvent_EventType(t).String()), attrKey.String(k.String()), attrVersion.String(v.String())))
	span.End()
	return tracing.Traceparent(span.SpanContext())
}

// traceBatch starts the span of a write-behind batch, when any of the writes it
// persists is traced: a child of the first traced write's accept span, linked to
// the other traced writes' (a batch combines the writes of many requests, of many
// traces, and a key's writes since the last batch coalesced into one op).
// end ends it with the batch's outcome; ctx is unchanged when nothing is traced.
func traceBatch(ctx context.Context, batch []view.BatchOp) (_ context.Context, end func(error)) {
	nothing := func(error) {}
	if !tracing.Enabled() {
		return ctx, nothing
	}
	var scs []trace.SpanContext
	for _, b := range batch {
		for _, tr := range b.Traces {
			scs = append(scs, tr.(*writeTrace).sc)
		}
	}
	if len(scs) == 0 {
		return ctx, nothing
	}
	pctx, links, _ := tracing.Batch(ctx, scs)
	ctx, span := tracer.Start(pctx, spanWriteBatch, trace.WithLinks(links...),
		trace.WithAttributes(attrEndpoints.Int(len(batch)), attrTraced.Int(len(scs))))
	return ctx, func(err error) { endSpan(span, err) }
}

// traceBackend starts the span of a batch's backend Apply under its batch span
// (ctx); it starts none for a batch that is not traced.
func traceBackend(ctx context.Context, backend registry.Registry, ops []registry.Op) (_ context.Context, end func(error)) {
	if !trace.SpanContextFromContext(ctx).IsValid() || !tracing.Enabled() {
		return ctx, func(error) {}
	}
	name := "unknown"
	if n, ok := backend.(interface{ Name() string }); ok {
		name = n.Name()
	}
	ctx, span := tracer.Start(ctx, spanBackendApply, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attrBackend.String(name), attrEndpoints.Int(len(ops))))
	return ctx, func(err error) { endSpan(span, err) }
}

func endSpan(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}
