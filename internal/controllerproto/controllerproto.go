// Package controllerproto holds what the controller protocol (switchboard.controller.v1,
// between the control plane and the data-plane nodes) fixes beyond its messages: the
// exact error strings of a ConfigCommandAck that the control plane acts on. Both ends
// use these constants, so neither imports the other's code for them;
// docs/controlplane.md ("How it converges") says what the control plane does on each.
package controllerproto

// Error strings a node puts in ConnectionStatus.error and SubscriptionStatus.error.
const (
	// ConnectionNotFound: the node has no connection with the link id. For a delete
	// the control plane counts it as done; for a subscribe it means the connection
	// vanished after the pre-flight check, and the node is reconciled again.
	ConnectionNotFound = "connection not found"
	// SubscriptionNotFound: the node has no such subscription; an unsubscribe counts
	// it as done.
	SubscriptionNotFound = "subscription not found"
)
