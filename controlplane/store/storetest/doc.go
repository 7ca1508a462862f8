// Package storetest is the conformance suite every control plane store passes: one call,
// Run, checks records, filters, ordering, the link and route state machines
// (docs/controlplane.md, "Link State Machine" and "Route State Machine"),
// segments, clearing and closing.
package storetest
