// Package leader elects which replica of the control plane leads, with etcd's
// concurrency.Election (docs/controlplane.md, "High availability").
//
// A replica campaigns with a lease of its own; once elected it leads until its
// context ends (it resigns) or it can no longer be sure it holds the lease. The
// lease is renewed here rather than only by the session, so that the time of the
// last renewal that etcd acknowledged is known: etcd expires the lease no earlier
// than TTL after that renewal was sent, and the leader steps down a margin before
// then. A new leader can only be elected after the expiry, so the old one has
// stopped by the time the new one starts — and should it not have (a paused
// process), its store writes are fenced on the election key.
package leader
