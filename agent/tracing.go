package agent

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/switchboard-mesh/switchboard/internal/tracing"
	"github.com/switchboard-mesh/switchboard/registry"
)

// Tracing (docs/operations.md, "Tracing"): with tracing on, each write of the
// agent's entries to the registry is the root of a trace, agent.apply; through the
// registrar client the write's call carries it, so the registrar's spans and every
// watching agent's are in the same trace. With tracing off it is one check.

var tracer = tracing.NewTracer("github.com/switchboard-mesh/switchboard/agent")

// spanApply is the agent's span of one write of its entries.
const spanApply = "agent.apply"

// maxKeyAttrs bounds the endpoint keys a span lists.
const maxKeyAttrs = 16

// publish writes ops through the publisher, in a trace of their own when tracing
// is on. why is "reconcile" (the publish gate's decisions) or "shutdown" (the
// removal of everything on the way out).
func (l *loop) publish(ctx context.Context, ops []registry.Op, why string) error {
	if !tracing.Enabled() {
		return l.pub.Apply(ctx, ops)
	}
	var reg, unreg []string
	for _, op := range ops {
		k := op.Endpoint.Key().String()
		if op.Kind == registry.OpRegister {
			reg = append(reg, k)
		} else {
			unreg = append(unreg, k)
		}
	}
	attrs := []attribute.KeyValue{
		attribute.String("switchboard.agent.reason", why),
		attribute.Int("switchboard.register", len(reg)),
		attribute.Int("switchboard.unregister", len(unreg)),
	}
	if len(reg) > 0 {
		attrs = append(attrs, attribute.StringSlice("switchboard.register.keys", reg[:min(len(reg), maxKeyAttrs)]))
	}
	if len(unreg) > 0 {
		attrs = append(attrs, attribute.StringSlice("switchboard.unregister.keys", unreg[:min(len(unreg), maxKeyAttrs)]))
	}
	// A new root: a registration is a trace of its own, whatever ctx holds.
	ctx, span := tracer.Start(ctx, spanApply, trace.WithNewRoot(), trace.WithAttributes(attrs...))
	err := l.pub.Apply(ctx, ops)
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
	return err
}
