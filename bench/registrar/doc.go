// Command registrar benchmarks the Registrar (docs/registrar.md) on a real backend —
// an embedded etcd server — over loopback gRPC, and writes the results as a
// Markdown table, recorded with its explanation in docs/benchmarks/registrar.md:
//
//	go run ./bench/registrar -out /tmp/registrar.md
//	go run ./bench/registrar -scenarios fanout,storm -watchers 500
//
// Scenarios: fanout (latency from RegisterEndpoint until the last watcher has the
// event, watchers in a child process), memory (registrar heap and stacks per idle
// watcher, watchers in a child process), snapshot (one new watcher's full snapshot), storm (many watchers taking
// a snapshot at once), batching (backend Apply calls for a burst of registrations),
// read (the client's cached read) and direct (agents on the backend directly versus
// through one registrar).
//
// Benchmark watchers decode only what they measure (event type and address), so the
// numbers are the registrar's, not the cost of 1,000 agents decoding on the same two
// cores; the snapshot scenario also times the real client. The child processes are
// this program run again with -role.
package main
