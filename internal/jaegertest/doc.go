// Package jaegertest runs a real Jaeger for tests that check the traces
// Switchboard's processes export over OTLP: what a trace holds is only known once
// a real backend has received, translated and stored it, and an in-process span
// recorder checks none of that (the exporter, the wire, the resource, the
// translation of parents and links).
//
// It owns building and caching the Jaeger binary through internal/toolbin
// (all-in-one v1.75.0, which is Jaeger v2: an OpenTelemetry collector with Jaeger's
// memory storage and query API, from the separate module tools/jaeger so the main
// module never requires Jaeger), the configuration it runs with (an OTLP/gRPC
// receiver, memory storage and the query extension's HTTP API, each on a free
// loopback port, nothing else listening), the child process's lifetime, and reading
// traces back through the query API (/api/traces).
//
// Jaeger is opt-in because building it takes minutes: Start skips the test unless
// SWITCHBOARD_JAEGER=1 (build it once into the user cache directory, holding a file
// lock so that parallel test packages build it once) or SWITCHBOARD_JAEGER_BIN=path
// (use that binary) is set; `make test-jaeger` sets the first and runs the tests
// named *Jaeger*.
//
// It must not import any switchboard package other than internal/ test helpers, so
// that every package under test can use it.
package jaegertest
