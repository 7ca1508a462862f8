// Package embedetcd runs real etcd servers inside a test binary: one member or a
// multi-member cluster on 127.0.0.1 with free ports and a temporary data directory,
// whose members can be stopped and restarted to exercise failover.
//
// It exists so that the etcd registry backend (registry/etcd, docs/backends.md, "etcd")
// and the packages built on it, such as the registrar, test against etcd itself rather
// than a mock (docs/development.md, "Real servers in tests"). Servers log at error
// level only, and fsync is off unless asked for, because test data is thrown away.
//
// A server is heavy (a few hundred milliseconds to start, tens of goroutines): share
// one per test binary from TestMain with Start, or use New inside a single test.
package embedetcd
