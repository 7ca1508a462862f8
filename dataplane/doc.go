// Package dataplane is the data-plane side of the control-plane protocol: the
// Controller (docs/controlplane.md, "The data-plane side").
//
// A Controller holds one bidirectional ControllerService stream to the control plane
// (CP). Each time it connects it resets its session state, registers the node (with a
// token from a nodeauth TokenProvider and the link ids of the node's live
// connections), replays the node's name announcements and link claims, and then
// applies the CP's ConfigCommands to a Datapath, answering each with a
// ConfigCommandAck. Subscription acks from the datapath are tracked by timers in a
// message-id map; a missing ack becomes a failure status after AckTimeout.
//
// Unlike the spec, the Controller never stops reconnecting: it retries with capped
// exponential backoff and full jitter, forever, until its context ends or the node
// deregisters.
//
// The Datapath interface is what the controller drives; memdp holds an in-memory
// implementation with fault injection for tests and benchmarks.
package dataplane
