// Package jetstream is the registry backend that keeps endpoints in a NATS JetStream
// stream used as a KV store (docs/backends.md, "jetstream", explains the design).
//
// Each endpoint is one subject, <prefix>.<cluster>.<protocol>.<service>.<address>.<id>,
// holding its JSON form; the stream keeps one message per subject, so a read is "last
// message per subject". Per-entry TTLs ride in Nats-TTL under the stream's MaxAge
// ("never" outlives it). Expiry leaves a server delete marker and Unregister publishes
// a removal (a marker of our own that lives as long as the entry it replaces could
// have: a server crash can bring that entry back once nothing newer is on its subject),
// so watchers see both as Removed; lookups drop them. Another writer's purge leaves no
// marker: a watch finds such removals by re-reading its subjects now and then. The
// stream refuses hard deletes. A full lookup reads through a consumer; a filtered one
// with one batched last-per-subject direct get (multi_last) where the stream allows
// direct get (list.go, multilast.go). An IPv6 address another writer spelled otherwise
// (2001:DB8::1) is read under its canonical key, and an unregister of that key finds
// and clears the subject it was written on (spelling.go). docs/backends.md sets out
// the read paths and their consistency, the wire format shared with other writers
// (the compatibility contract), the removal sizing and its cost. That format is CCM's,
// which has no region, zone or health: they travel as annotations under the reserved
// prefix endpoint.switchboard.dev/, lifted back into the fields on read (locality.go).
// A registrar keeps its entries alive by a hold (registry.Holder): a liveness subject
// of its own, <prefix>._hold.<id>, republished with a short Nats-TTL, entries that
// name it in a header and live until MaxAge, and a reaper in every holding process
// that removes them once that liveness has expired (hold.go, reaper.go).
//
// Two backends are registered: "jetstream" (New) and "nats", a best-effort
// destination (NewPublisher): core NATS publishes without TTL or rollup headers and
// without acks, for fire-and-forget publishers; it cannot be read back. Both are
// drivers behind a registry.Front, which holds the rules every backend shares.
package jetstream
