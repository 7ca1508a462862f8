// Package client is the agent side of the registrar (docs/registrar.md, "The agent
// side"): a registry.Registry and registry.Watcher, registered as the backend
// "registrar", that talks to one or more registrar replicas over gRPC. Like every
// backend it is a driver behind a registry.Front, which holds the rules every backend
// shares; Client is that front with the client's own methods (WaitReady).
//
// Reads are served from a local cache fed by the WatchEndpoints stream (before the
// stream's first snapshot completes, List asks the registrar with ListAllEndpoints).
// Writes go to the registrar and update the cache at once; the local overlay of a
// write stays until the stream has caught up with it, so a read never goes back in
// time. The stream reconnects forever with exponential backoff and full jitter,
// resumes from the last version it applied, and the cache keeps serving the
// last-known-good state meanwhile (docs/registrar.md, "The agent side").
//
// The client remembers each write until the registrar reports it persisted (the
// persisted frontier carried by events). When it lands on a registrar replica of a
// new epoch (failover, restart), it compares the writes it still remembers with the
// new replica's snapshot and sends again those the registrar lost — what a crashed
// replica had accepted but not yet persisted.
//
// The cache (cache.go) has a file per job: applying the stream's snapshots and
// events (snapshot.go, a new snapshot diffed against the last with registry.Diff),
// the writes not yet persisted (ledger.go), the indexed view reads are served from
// (readcache.go), and where it stands with the stream (stream.go) and with a
// scoped client's services (scope.go).
//
// With tracing on in the process (internal/tracing, docs/operations.md "Tracing"),
// a write's call carries its caller's trace context, a re-send continues the traces
// of the writes it sends, and a change event that carries the registrar's trace
// context is applied under a span of that trace (tracing.go).
//
// It must not import the registrar server (package registrar) nor a registry
// backend: the agent links the client alone, and the registry backends it holds
// must stay the ones a program chose.
package client
