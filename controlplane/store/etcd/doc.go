// Package etcd is the control plane store on etcd, for running several control-plane
// replicas of which one leads (docs/controlplane.md, "High availability").
//
// Every record is one key under a prefix, JSON-encoded. The store keeps a memory
// store as its cache: reads are served from it, and every write — a single call or a
// Store.Atomically transaction — is applied to the cache and committed to etcd as one
// Txn before the cache's lock is released. The Txn compares the mod revision of every
// key it writes with the one the cache last saw, so a write that another writer
// raced fails with store.ErrConflict instead of overwriting it; versions and the
// state machines are checked by the cache exactly as the memory store checks them.
//
// Fencing: a store opened with RequireLeader refuses writes until Lead is called
// with the leader key of an etcd election, and from then on every Txn also compares
// that key's create revision. A replica that lost its lease (its key is gone, or is
// another replica's) cannot write any more, whatever it still believes: its writes
// fail with ErrNotLeader. A standby's reads are served from a copy of etcd's
// contents, re-read when a watch on the prefix reports a change.
//
// A transaction is one etcd Txn, so etcd's --max-txn-ops (128 by default) bounds how
// many records one may write; a control plane of more than a few groups needs it
// raised (docs/controlplane.md says by how much).
package etcd
