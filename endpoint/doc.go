// Package endpoint is Switchboard's one data model: an endpoint is one reachable
// instance of a service (docs/architecture.md, "The one data model").
//
// Every part of the system — registry backends, the registrar protocol, the agent and
// the JetStream subjects — uses these types, and every entry point calls Validate, so
// bad input is rejected with an error naming the field before anything is stored.
// Read liberally, write strictly: what a backend reads back is held to ValidateRead,
// which also keeps the control characters another writer may have stored in a node or
// annotation value, for whatever renders them to escape or refuse.
package endpoint
