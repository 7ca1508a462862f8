// Package store holds the control plane's records — nodes, links, routes, segments and
// segment links — and the Store interface that persists them. Two implementations live in
// the subpackages memory and sqlite; storetest is the suite both pass.
//
// The records and the link and route state machines are those of the control-plane
// specification ("Link State Machine", "Route State Machine"). The
// stores enforce the state machines: a status change that the machine does not allow
// fails with ErrInvalidTransition, so a late acknowledgement can never revive a record
// that was marked deleted in the meantime.
//
// Links and routes carry a Version the store bumps on every change. The reconcilers,
// which read a record, talk to a node and only then write, make their writes
// conditional on the version they decided from (LinkUpdate.IfVersion,
// RouteUpdate.IfVersion, DeleteLinkIf, DeleteRouteIf): a stale one fails with
// ErrConflict and changes nothing, so a reconciler cannot overwrite what the core
// decided meanwhile (a gateway failover, a re-key, a reset).
//
// Store.Atomically makes several calls one change: the core runs each lifecycle event
// (a registration, a departure with its failover and route cleanup, a claim, a
// topology change) in one, so a failure half-way leaves nothing half-applied. The
// transaction travels in the context, so wrappers around a Store keep working; SQLite
// runs a real write transaction (savepoints when nested), the memory store holds its
// lock and undoes the recorded writes on failure. Both take the write lock at the
// transaction's first write, so an event still deciding keeps no reconciler waiting.
package store
