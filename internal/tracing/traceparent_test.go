package tracing

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

func spanContext(t testing.TB, tid, sid string, sampled bool) trace.SpanContext {
	t.Helper()
	ti, err := trace.TraceIDFromHex(tid)
	if err != nil {
		t.Fatal(err)
	}
	si, err := trace.SpanIDFromHex(sid)
	if err != nil {
		t.Fatal(err)
	}
	var f trace.TraceFlags
	if sampled {
		f = trace.FlagsSampled
	}
	return trace.NewSpanContext(trace.SpanContextConfig{TraceID: ti, SpanID: si, TraceFlags: f})
}

// Traceparent writes what OpenTelemetry's W3C propagator writes, and
// ParseTraceparent reads it back as a remote span context.
func TestTraceparentMatchesTheW3CPropagator(t *testing.T) {
	for _, sampled := range []bool{true, false} {
		sc := spanContext(t, "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7", sampled)
		carrier := propagation.MapCarrier{}
		propagation.TraceContext{}.Inject(trace.ContextWithSpanContext(context.Background(), sc), carrier)
		got := Traceparent(sc)
		if want := carrier.Get("traceparent"); got != want {
			t.Fatalf("Traceparent = %q, the propagator writes %q", got, want)
		}
		back, ok := ParseTraceparent(got)
		if !ok || !back.IsRemote() || back.TraceID() != sc.TraceID() || back.SpanID() != sc.SpanID() || back.IsSampled() != sampled {
			t.Fatalf("ParseTraceparent(%q) = %v %v, want %v, remote", got, back, ok, sc)
		}
	}
	if s := Traceparent(trace.SpanContext{}); s != "" {
		t.Fatalf("an invalid span context gave %q, want empty", s)
	}
}

// ParseTraceparent accepts and refuses exactly what the W3C propagator does.
func TestParseTraceparentAgreesWithThePropagator(t *testing.T) {
	const tid, sid = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	for _, s := range []string{
		"00-" + tid + "-" + sid + "-01",
		"00-" + tid + "-" + sid + "-00",
		"00-" + tid + "-" + sid + "-03",     // sampled and random
		"00-" + tid + "-" + sid + "-09",     // reserved bits: invalid in version 00
		"01-" + tid + "-" + sid + "-09",     // ignored in a later one
		"01-" + tid + "-" + sid + "-01-xyz", // a later version may carry more
		"01-" + tid + "-" + sid + "-01",
		"00-" + tid + "-" + sid + "-01-xyz", // version 00 may not
		"ff-" + tid + "-" + sid + "-01",
		"00-00000000000000000000000000000000-" + sid + "-01",
		"00-" + tid + "-0000000000000000-01",
		"00-4BF92F3577B34DA6A3CE929D0E0E4736-" + sid + "-01",
		"00-" + tid + "-" + sid + "-0g",
		"0x-" + tid + "-" + sid + "-01",
		"00-" + tid + "-" + sid + "01",
		"00_" + tid + "-" + sid + "-01",
		"01-" + tid + "-" + sid + "-01x",
		"",
		"00-" + tid,
	} {
		ctx := propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier{"traceparent": s})
		want := trace.SpanContextFromContext(ctx)
		got, ok := ParseTraceparent(s)
		if ok != want.IsValid() || (ok && !got.Equal(want)) {
			t.Errorf("ParseTraceparent(%q) = %v, %v; the propagator reads %v (valid %v)", s, got, ok, want, want.IsValid())
		}
	}
}

func FuzzParseTraceparent(f *testing.F) {
	f.Add("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	f.Add("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x")
	f.Fuzz(func(t *testing.T, s string) {
		ctx := propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier{"traceparent": s})
		want := trace.SpanContextFromContext(ctx)
		got, ok := ParseTraceparent(s)
		if ok != want.IsValid() || (ok && !got.Equal(want)) {
			t.Fatalf("ParseTraceparent(%q) = %v, %v; the propagator reads %v", s, got, ok, want)
		}
		if ok {
			if again, _ := ParseTraceparent(Traceparent(got)); !again.Equal(got) {
				t.Fatalf("%q does not round-trip", s)
			}
		}
	})
}

// Batch makes the first traced request the parent and links the others, each
// once.
func TestBatchParentsTheFirstAndLinksTheRest(t *testing.T) {
	a := spanContext(t, "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7", true)
	b := spanContext(t, "5bf92f3577b34da6a3ce929d0e0e4736", "10f067aa0ba902b7", true)
	c := spanContext(t, "6bf92f3577b34da6a3ce929d0e0e4736", "20f067aa0ba902b7", true)
	ctx, links, ok := Batch(context.Background(), []trace.SpanContext{{}, a, b, a, {}, c, b})
	if !ok {
		t.Fatal("no parent")
	}
	if p := trace.SpanContextFromContext(ctx); !p.Equal(a) {
		t.Fatalf("parent %v, want the first traced, %v", p, a)
	}
	if len(links) != 2 || !links[0].SpanContext.Equal(b) || !links[1].SpanContext.Equal(c) {
		t.Fatalf("links %v, want b and c once each", links)
	}
	if _, _, ok := Batch(context.Background(), []trace.SpanContext{{}, {}}); ok {
		t.Fatal("a batch without traced requests has a parent")
	}
	many := make([]trace.SpanContext, 0, MaxLinks+10)
	for i := range MaxLinks + 10 {
		var sid trace.SpanID
		sid[0], sid[1] = byte(i>>8)+1, byte(i)
		many = append(many, trace.NewSpanContext(trace.SpanContextConfig{TraceID: a.TraceID(), SpanID: sid}))
	}
	if _, links, _ := Batch(context.Background(), many); len(links) != MaxLinks {
		t.Fatalf("%d links, want at most %d", len(links), MaxLinks)
	}
}
