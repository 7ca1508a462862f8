// Package leastprivilege proves, against real servers with authorization enforced,
// that the NATS permissions and etcd roles documented in docs/operations.md
// ("Least-privilege NATS and etcd credentials") are enough for every operation of each
// Switchboard role, and that one step outside them is refused.
//
// It holds only tests. They start an embedded nats-server whose users carry the
// documented permission blocks verbatim, and an embedded etcd with auth enabled by the
// documented etcdctl commands, then drive the jetstream, nats and etcd backends
// through registry.Open with those users' credentials.
package leastprivilege
