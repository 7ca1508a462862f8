package tracing

import (
	"context"
	"encoding/hex"

	"go.opentelemetry.io/otel/trace"
)

// keptFlags are the trace flags the specification defines: sampled and random.
const keptFlags = trace.FlagsSampled | trace.FlagsRandom

// traceparentLen is the length of a version-00 W3C traceparent:
// 00-<32 hex trace id>-<16 hex parent id>-<2 hex flags>.
const traceparentLen = 55

// Traceparent returns sc as a W3C traceparent header value
// (https://www.w3.org/TR/trace-context/#traceparent-header), "" when sc is not
// valid. Only the flags the specification defines (sampled, random) are carried;
// tracestate is not.
func Traceparent(sc trace.SpanContext) string {
	if !sc.IsValid() {
		return ""
	}
	var b [traceparentLen]byte
	b[0], b[1], b[2] = '0', '0', '-'
	tid, sid := sc.TraceID(), sc.SpanID()
	hex.Encode(b[3:35], tid[:])
	b[35] = '-'
	hex.Encode(b[36:52], sid[:])
	b[52] = '-'
	flags := [1]byte{byte(sc.TraceFlags() & keptFlags)}
	hex.Encode(b[53:55], flags[:])
	return string(b[:])
}

// ParseTraceparent reads a W3C traceparent header value into a remote span
// context, as OpenTelemetry's TraceContext propagator does: version 00 exactly
// (55 characters, no reserved flag bits), or a later version with possibly more
// fields after a '-'; lower-case hex only; version ff, an all-zero trace id or
// parent id are invalid. ok is false for anything else.
func ParseTraceparent(s string) (sc trace.SpanContext, ok bool) {
	if len(s) < traceparentLen || s[2] != '-' || s[35] != '-' || s[52] != '-' {
		return sc, false
	}
	var ver [1]byte
	if !lowerHex(s[0:2]) || decode(ver[:], s[0:2]) != nil || ver[0] == 0xff {
		return sc, false
	}
	if (ver[0] == 0 && len(s) != traceparentLen) || (len(s) > traceparentLen && s[traceparentLen] != '-') {
		return sc, false
	}
	var tid trace.TraceID
	var sid trace.SpanID
	var flags [1]byte
	if !lowerHex(s[3:35]) || !lowerHex(s[36:52]) || !lowerHex(s[53:55]) {
		return sc, false
	}
	if decode(tid[:], s[3:35]) != nil || decode(sid[:], s[36:52]) != nil || decode(flags[:], s[53:55]) != nil {
		return sc, false
	}
	if ver[0] == 0 && flags[0] > byte(keptFlags) { // reserved bits of version 00
		return sc, false
	}
	sc = trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: tid, SpanID: sid, TraceFlags: trace.TraceFlags(flags[0]) & keptFlags, Remote: true,
	})
	return sc, sc.IsValid()
}

func decode(dst []byte, s string) error {
	_, err := hex.Decode(dst, []byte(s))
	return err
}

// lowerHex reports whether s is hex digits with no upper-case letter, as the
// specification requires.
func lowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// ContextWithTraceparent returns ctx with the span context of traceparent tp as its
// remote parent; ok is false, and ctx unchanged, when tp does not parse.
func ContextWithTraceparent(ctx context.Context, tp string) (context.Context, bool) {
	sc, ok := ParseTraceparent(tp)
	if !ok {
		return ctx, false
	}
	return trace.ContextWithRemoteSpanContext(ctx, sc), true
}

// MaxLinks bounds the links Batch gives one span: OpenTelemetry's SDK keeps 128
// links a span by default and drops the rest.
const MaxLinks = 128

// Batch prepares a span for work done for many traced requests at once (a
// registrar's write batch, a client's re-send): the returned context has the first
// valid span context of scs as its parent, and links lists the other distinct
// ones, at most MaxLinks. ok is false, and ctx unchanged, when scs holds no valid
// span context.
func Batch(ctx context.Context, scs []trace.SpanContext) (_ context.Context, links []trace.Link, ok bool) {
	var parent trace.SpanContext
	seen := map[trace.SpanID]bool{}
	for _, sc := range scs {
		if !sc.IsValid() || seen[sc.SpanID()] {
			continue
		}
		seen[sc.SpanID()] = true
		if !parent.IsValid() {
			parent = sc
			continue
		}
		if len(links) < MaxLinks {
			links = append(links, trace.Link{SpanContext: sc})
		}
	}
	if !parent.IsValid() {
		return ctx, nil, false
	}
	return trace.ContextWithSpanContext(ctx, parent), links, true
}
