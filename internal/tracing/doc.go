// Package tracing owns Switchboard's OpenTelemetry tracing (docs/operations.md,
// "Tracing"): whether it is on in this process, the tracer provider and its OTLP/gRPC
// exporter built from the command's flags and the standard OTEL_* environment
// variables (Setup), the gRPC options that trace calls and carry W3C trace context
// on them (ServerOptions, DialOptions), and the W3C traceparent form a span context
// takes where it travels inside a message of Switchboard's own (a registrar's
// EndpointEvent): Traceparent and ParseTraceparent.
//
// Tracing is off unless Setup (or Use, in tests) turns it on. While it is off,
// Enabled is false, ServerOptions and DialOptions are empty — no stats handler is
// installed, nothing is added to the wire — and callers start no spans: every place
// that would start one checks Enabled first, one atomic load.
//
// It must not import any other Switchboard package, so that every package can use it.
package tracing
