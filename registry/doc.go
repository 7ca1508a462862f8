// Package registry defines the contract of an endpoint store (Registry, Watcher) and
// the one type every store is used through: Front, which holds the contract's shared
// rules (validation, the closed state, calls in flight, cancellation, consistent
// watches, metrics) in front of a backend's Driver — memory, JetStream, etcd,
// DynamoDB, Cloud Map or the registrar client — as *sql.DB does in front of a
// database/sql driver. Backends register themselves in init, and Open opens one by
// name; programs import a backend's package for that side effect.
package registry
