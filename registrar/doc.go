// Package registrar is the in-cluster Registrar (docs/registrar.md): the one bridge
// between a cluster's agents and the external registry.
//
// A Registrar keeps a versioned in-memory snapshot of every cluster's endpoints
// (package registrar/internal/view), fed by polling the backend's List every sync interval and, when the
// backend has one, by its native watch (sync.go). Writes from agents are accepted into
// the snapshot and broadcast at once, then persisted in coalesced batches by a
// write-behind writer (writer.go); pending writes are overlaid on every sync result so
// an endpoint never flaps. Watchers read one shared, bounded history ring through their
// own cursor (package registrar/internal/hub): a watcher that falls behind the ring is resynced with a full
// snapshot, never slows the others and never silently loses an event. Resume tokens
// carry the replica's epoch (package registrar/token), so a token from another replica
// or epoch is never misread. Events carry the persisted frontier, which lets a client
// forget the writes it would otherwise send again after a failover.
//
// Server (server.go) wires the gRPC service switchboard.registrar.v1.Registrar, the
// gRPC health and reflection services and the HTTP health port (/healthz, /readyz,
// /metrics, and the read-only web page at /ui, package registrar/ui, which reads the
// registrar only through the introspection API of inspect.go). The agent side lives
// in registrar/client.
package registrar
