// Package view is the registrar's versioned view of the registry: the snapshot
// its watchers see, and everything that feeds it, under one lock so that a
// change, its version and its event are one atomic step.
//
// It owns the visible entries (indexed by cluster and by service), the backend
// view they are built from, the writes accepted but not yet persisted that
// overlay it (pending.go), the guards that keep a full read of the backend from
// undoing newer changes (syncstate.go), the echoes of our own writes
// (echo.go), the persisted frontier (frontier.go), the state digest
// (digest.go), the history ring of encoded events and its version sequence,
// the shared full snapshot (snapshot.go, partition.go, compress.go) and the
// listing (listing.go). It is the one owner of the promises the registrar makes
// its watchers: no event is lost during a snapshot (a snapshot holds exactly
// the state at its version, and the ring every event after it), nothing flaps
// when a full read lands (pending writes and newer changes stay overlaid), and
// a resume token names a state, never one that merely looks like it (versions
// carry the epoch and the digest).
//
// It has no gRPC in it: it must never import google.golang.org/grpc (mem
// included), the generated registrar package (it carries gRPC stubs), nor the
// registrar's own packages that send. Events and snapshots are plain bytes
// (internal/wire encodes them); what the sending layer makes of them, once per
// event or part, it attaches through Config's hooks, so that no watcher wraps
// them again.
package view
