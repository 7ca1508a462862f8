package reconcile_test

import (
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/switchboard-mesh/switchboard/controlplane/config"
	"github.com/switchboard-mesh/switchboard/internal/tracing"
)

// With tracing on, each pass of a reconciler over a node is a trace of its own,
// naming the node and what its command asked: the link that is created, the route
// batch that subscribes.
func TestReconcilePassesAreTraces(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	t.Cleanup(tracing.Use(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))))
	r := newRig(t, config.DatabaseInMemory, false)
	src := r.link().SourceNodeID
	if err := r.links.Sync(r.ctx, src); err != nil {
		t.Fatal(err)
	}
	r.converge()
	route := r.route()
	var links, routes []sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.Parent().IsValid() {
			t.Errorf("span %s has parent %v: a pass is a root", s.Name(), s.Parent())
		}
		switch s.Name() {
		case "controlplane.reconcile.links":
			links = append(links, s)
		case "controlplane.reconcile.routes":
			routes = append(routes, s)
		default:
			t.Errorf("unexpected span %s", s.Name())
		}
	}
	has := func(spans []sdktrace.ReadOnlySpan, node string, key attribute.Key) bool {
		for _, s := range spans {
			var onNode, asked bool
			for _, a := range s.Attributes() {
				onNode = onNode || (a.Key == "switchboard.node_id" && a.Value.AsString() == node)
				asked = asked || (a.Key == key && a.Value.AsInt64() > 0)
			}
			if onNode && asked {
				return true
			}
		}
		return false
	}
	if !has(links, src, "switchboard.connections.create") {
		t.Errorf("no link pass of %s that creates a connection among %d", src, len(links))
	}
	if !has(routes, route.SourceNodeID, "switchboard.subscriptions.set") {
		t.Errorf("no route pass of %s that sets a subscription among %d", route.SourceNodeID, len(routes))
	}
}
