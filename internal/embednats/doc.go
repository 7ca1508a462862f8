// Package embednats runs nats-server with JetStream inside this process: one server or
// a small cluster on loopback, with its data in a directory of the caller's choosing.
//
// It is what `switchboard dev` serves to users who have no NATS cluster, and what the
// JetStream registry tests (and any other test needing NATS) start instead of a mock —
// real servers on random ports, the shape of nats-server's own
// server/jetstream_helpers_test.go (docs/development.md, "Real servers in tests").
package embednats
