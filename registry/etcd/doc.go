// Package etcd is the etcd v3 registry backend (docs/backends.md, "etcd"). Importing it
// registers the backend "etcd" with registry.Open; like every backend it is a driver
// behind a registry.Front, which holds the rules every backend shares.
//
// # Key layout
//
// Each endpoint is one key whose value is the endpoint's JSON form (endpoint.Endpoint
// MarshalJSON):
//
//	<prefix><service>/<cluster>/<protocol>/<address>/<port>
//
// for example /switchboard/endpoints/web/prod/http/10.0.0.1/80. Service comes first
// because discovery asks for a service: a filter on service, service+cluster,
// service+cluster+protocol or all four key fields is one prefix range read. A filter
// that leaves service open (by cluster or protocol alone) reads the whole prefix and
// filters in the client. Names cannot contain '/' and addresses are canonical, so a
// key has exactly one parse and one endpoint has exactly one key.
//
// # Writes
//
// Apply gets the batch validated and netted out by the Front, and writes it as one Txn
// per chunk of at most MaxTxnOps operations (the server's --max-txn-ops, default 128),
// so a batch that fits is atomic: readers and watchers see all of it at one revision
// or none of it. Larger batches are atomic per chunk; on failure, ApplyError lists the
// keys of the chunks that were not confirmed written. If the server's limit (ops or request bytes) turns
// out lower than configured, the chunk size is halved and the chunk retried — a failed
// Txn applies nothing, so the retry is safe.
//
// # Reads
//
// List and a watcher's initial read are linearizable and read their range in pages
// of 2,000 keys, every page at the first page's revision, so the result is one
// consistent state however large; if that revision is compacted mid-read, the read
// starts over.
//
// # TTLs and leases
//
// An endpoint's TTL means "lives TTL after its last registration unless registered
// again" (as in the memory backend), so a lease kept alive while the registry is open
// would be wrong: it would keep alive the entries of agents that stopped refreshing.
// Instead, leases are shared per (TTL, time bucket) and never kept alive:
//
//   - For a TTL T the bucket width is B = T/10, rounded up to whole seconds and kept
//     within 1s..1m.
//   - The first write with TTL T in a bucket grants a lease of T+B seconds; every write
//     with TTL T in the next B attaches its key to that lease.
//   - A key attached at most B after the grant therefore lives between T and T+B after
//     its write (at least T minus one network round trip): a refresh moves the key to
//     the current bucket's lease, so it always gets a fresh expiry, and an old lease
//     expiring only removes the keys nobody refreshed.
//
// This costs one LeaseGrant per distinct TTL per B, whatever the write rate, and no
// keepalive traffic. Leases left behind by Close simply expire: entries must outlive a
// registrar replica, which another replica or the agent's next refresh takes over.
// Two etcd behaviours widen the window: lease expiry is checked by the leader about
// every 500ms, and a new leader extends every lease by its full TTL (no lease
// checkpointing), so a failover can delay expiry by up to T+B. An unset TTL and
// endpoint.Never write without a lease, detaching any earlier one.
//
// # Watch
//
// Watch reads the filter's range at revision R, sends it as Added events and
// registry.Synced, then watches the range from R+1, asking etcd for each event's
// previous value. The watcher keeps nothing of what it sent: a PUT is Added (a
// key's creation) or Updated, and the registry.Front drops one that leaves the
// endpoint as the watcher's caller holds it (a TTL refresh with the same fields,
// another writer's encoding of an equal endpoint). A DELETE — including a lease
// expiry — is Removed carrying the previous value, the endpoint as last sent.
//
// A broken stream is re-opened from the last revision seen (events and progress
// notifications), so nothing is lost or repeated. If that revision has been compacted,
// the watcher re-reads the range at the current revision and sends it whole after a
// registry.Reread; the Front sends the caller only the differences (Removed, Updated,
// Added), and the watcher resumes after that revision. A key removed meanwhile is
// Removed with its key fields only, as the registry contract allows: its last value
// is compacted away. Watches require a leader, so a
// watcher on a member cut off from the quorum moves to another.
//
// # Values etcd holds that are not ours
//
// A key under the prefix that does not parse, or whose value is not a valid endpoint
// with the key's identity, is skipped by List and treated as absent by watchers, with a
// warning: one bad record must not take discovery down.
package etcd
