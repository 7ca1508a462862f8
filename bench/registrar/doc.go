// Command registrar benchmarks the Registrar (docs/registrar.md) on a real backend —
// an embedded etcd server — over loopback gRPC, and writes the results as a
// Markdown table, recorded with its explanation in docs/benchmarks/registrar.md:
//
//	go run ./bench/registrar -out /tmp/registrar.md
//	go run ./bench/registrar -scenarios fanout,storm -watchers 500
//
// Scenarios: fanout (latency from RegisterEndpoint until the last watcher has the
// event, watchers in a child process), fanout10k (the same with 10,000 watchers over
// 100 connections and 100,000 endpoints, the watchers resuming from the current
// version), memory (registrar heap and stacks per idle watcher, read from the
// registrar's /debug/memory, watchers in a child process), snapshot (one new
// watcher's full snapshot right after READY, after a change and already built),
// storm and storm10k (many watchers taking a full snapshot at once, in a child
// process; storm10k also samples the peak RSS of the registrar's process), restart and
// restart10k (a registrar restart with nothing changed: the watchers reconnect to a new
// registrar with their tokens, and resume), batching
// (backend transactions, counted as etcd revisions, for a burst of registrations),
// read (the client's cached read), list (ListAllEndpoints) and direct (agents on
// the backend directly versus through one registrar).
//
// Benchmark watchers decode only what they measure (event type and address), so the
// numbers are the registrar's, not the cost of 1,000 agents decoding on the same two
// cores; the snapshot scenario also times the real client. The child processes are
// this program run again with -role.
package main
