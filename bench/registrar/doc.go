// Command registrar benchmarks the Registrar (docs/registrar.md) on a real backend —
// an embedded etcd server, or with -etcd-process an etcd process of its own — over
// loopback gRPC, and writes the results as a
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
// read (the client's cached read), list (ListAllEndpoints, each way timed by a client
// process of its own: undecoded, generated client, client.ListAll), direct (agents on
// the backend directly versus through one registrar) and page (the web page's first
// view at -snapshot-endpoints endpoints, and the fan-out's p99 with the page open
// beside it without) and, only when named, slowbackend (backend writes slowed to 2 s
// each for -slow-window while agents write, a lister lists and a watcher watches:
// reads against an unslowed window, the write queue's depth against its bound,
// writes refused with RESOURCE_EXHAUSTED, acknowledged writes lost; slowbackend.go).
//
// Benchmark watchers decode only what they measure (event type and address), so the
// numbers are the registrar's, not the cost of 1,000 agents decoding on the same two
// cores; the snapshot scenario also times the real client. The child processes are
// this program run again with -role.
//
// The watcher children's client is -watcher: h2 (the default) or grpc. The bench
// measures the registrar, but on a shared 2-core host the watchers' child takes its
// CPU from the same cores, and gRPC-go's per-stream receive path (the transport's
// reader, a receive buffer and a goroutine woken per stream, RecvMsg) costs more CPU
// per event than the registrar spends sending it — a cost each production agent pays
// on its own node. The h2 watcher (h2watch.go) reads the same bytes off the same
// loopback sockets, speaking gRPC over HTTP/2 with golang.org/x/net/http2's framer,
// but with one goroutine per connection handing every stream's messages to the
// same parsing code, as h2load-style load generators do. -watcher grpc keeps the
// gRPC-go watchers, for comparison with earlier figures.
package main
