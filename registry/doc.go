// Package registry defines the contract of an endpoint store (Registry, Watcher) and
// the one type every store is used through: Front, which holds the contract's shared
// rules (validation, the closed state, calls in flight, cancellation, consistent
// watches, metrics) in front of a backend's Driver — memory, JetStream, etcd,
// DynamoDB, Cloud Map or the registrar client — as *sql.DB does in front of a
// database/sql driver. Backends register themselves in init, and Open opens one by
// name; programs import a backend's package for that side effect.
//
// Front also owns what every backend's answers must look like, so that backends hand
// it raw state: List's filtering and order (Arrange), and a watch that after a
// backend's re-read of its whole state sends only the differences (Reread, Diff).
//
// It must not import a backend, nor anything but endpoint and the standard and
// metrics libraries: every backend imports it.
package registry
