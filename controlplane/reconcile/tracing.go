package reconcile

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	controllerv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/controller/v1"
	"github.com/switchboard-mesh/switchboard/internal/tracing"
)

// Tracing (docs/operations.md, "Tracing"): with tracing on, each pass of a
// reconciler over one node is a trace of its own: controlplane.reconcile.links
// (the node's outgoing links brought in line with the store: one ConfigCommand)
// or controlplane.reconcile.routes (the node's routes: one batch of
// subscriptions), with the node, what the command asked and the outcome. With
// tracing off a pass checks tracing.Enabled and starts nothing.

var tracer = tracing.NewTracer("github.com/switchboard-mesh/switchboard/controlplane/reconcile")

// Span names.
const (
	spanLinks  = "controlplane.reconcile.links"
	spanRoutes = "controlplane.reconcile.routes"
)

// startPass starts the span of one reconcile pass over nodeID, a new root; end
// ends it with the pass's outcome. Call it only when tracing is on.
func startPass(ctx context.Context, name, nodeID string) (_ context.Context, end func(error)) {
	ctx, span := tracer.Start(ctx, name, trace.WithNewRoot(), trace.WithAttributes(attribute.String("switchboard.node_id", nodeID)))
	return ctx, func(err error) { endPass(span, err) }
}

// endPass ends a pass's span with its outcome: a quick retry (ErrRetrySoon) is
// noted, not an error.
func endPass(span trace.Span, err error) {
	switch {
	case err == nil:
	case errors.Is(err, ErrRetrySoon):
		span.SetAttributes(attribute.Bool("switchboard.retry_soon", true))
		span.AddEvent("retry soon", trace.WithAttributes(attribute.String("reason", err.Error())))
	default:
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// noteCommand records on the pass's span, if there is one, what the pass's
// ConfigCommand asks of the node.
func noteCommand(ctx context.Context, cmd *controllerv1.ConfigCommand) {
	if !tracing.Enabled() {
		return
	}
	trace.SpanFromContext(ctx).SetAttributes(
		attribute.Int("switchboard.connections.create", len(cmd.GetConnectionsToCreate())),
		attribute.Int("switchboard.connections.delete", len(cmd.GetConnectionsToDelete())),
		attribute.Int("switchboard.subscriptions.set", len(cmd.GetSubscriptionsToSet())),
		attribute.Int("switchboard.subscriptions.delete", len(cmd.GetSubscriptionsToDelete())),
	)
}
