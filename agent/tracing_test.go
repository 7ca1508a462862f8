package agent

import (
	"context"
	"sync"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/switchboard-mesh/switchboard/internal/tracing"
	"github.com/switchboard-mesh/switchboard/registry"
)

// spanPublisher notes the span context each write is made under.
type spanPublisher struct {
	mu  sync.Mutex
	scs []trace.SpanContext
	ops [][]registry.Op
}

func (p *spanPublisher) Apply(ctx context.Context, ops []registry.Op) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.scs = append(p.scs, trace.SpanContextFromContext(ctx))
	p.ops = append(p.ops, ops)
	return nil
}

func (p *spanPublisher) writes() ([]trace.SpanContext, [][]registry.Op) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]trace.SpanContext(nil), p.scs...), append([][]registry.Op(nil), p.ops...)
}

// With tracing on, each write of the entries is made under a new root span,
// agent.apply, which the write's call carries on; the removal on shutdown too.
func TestWritesAreTracedWhenTracingIsOn(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	t.Cleanup(tracing.Use(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))))
	p := &spanPublisher{}
	e := ep("web", "10.0.0.1", 80, time.Minute)
	a := start(t, manifestOf(mentry(e)), Options{Publisher: p})
	eventually(t, "registered", func() bool { scs, _ := p.writes(); return len(scs) == 1 })
	if err := a.stop(t); err != nil {
		t.Fatal(err)
	}
	scs, ops := p.writes()
	if len(scs) != 2 || ops[0][0].Kind != registry.OpRegister || ops[1][0].Kind != registry.OpUnregister {
		t.Fatalf("writes %v: want the registration and the removal on shutdown", ops)
	}
	spans := rec.Ended()
	if len(spans) != 2 {
		t.Fatalf("%d spans, want one per write", len(spans))
	}
	for i, s := range spans {
		if s.Name() != spanApply || s.Parent().IsValid() || s.SpanContext().SpanID() != scs[i].SpanID() {
			t.Errorf("span %d: %s (parent %v), write made under %v: want a root %s the write is made under", i, s.Name(), s.Parent(), scs[i].SpanID(), spanApply)
		}
	}
	if scs[0].TraceID() == scs[1].TraceID() {
		t.Error("the registration and the removal share a trace")
	}
}

// Off, the agent starts no span: the write's context holds none.
func TestWritesAreNotTracedWhenTracingIsOff(t *testing.T) {
	if tracing.Enabled() {
		t.Fatal("tracing is on")
	}
	p := &spanPublisher{}
	start(t, manifestOf(mentry(ep("web", "10.0.0.1", 80, time.Minute))), Options{Publisher: p})
	eventually(t, "registered", func() bool { scs, _ := p.writes(); return len(scs) == 1 })
	if scs, _ := p.writes(); scs[0].IsValid() {
		t.Fatalf("a write made under span %v with tracing off", scs[0])
	}
}
