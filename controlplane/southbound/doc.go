// Package southbound is the control plane's ControllerService, the gRPC endpoint data-plane
// nodes keep one bidirectional stream open to (docs/controlplane.md, "The data-plane
// side"): registration and its authentication, deregistration, crash disconnect, and
// configuration a node sends on its own.
//
// A stream goes through three phases:
//
//  1. Handshake: the CP greets with an Ack; the first message must be a
//     RegisterNodeRequest and must arrive within the registration timeout (15 s). Its
//     credentials are verified before anything is saved: a denial ends the stream with
//     PermissionDenied and the authenticator's reason. Then the node is registered
//     (controlplane.Service.NodeRegistered), its stream handed to the node command
//     handler, the RegisterNodeResponse sent, and the reconcilers queued.
//  2. Message loop: responses (reply_to set) go to the request waiting for them;
//     ConfigCommands from the node are processed inline — subscriptions without a link
//     id announce or withdraw wildcard routes, connections_received claim links — and
//     acknowledged per item. Announcements and claims the node repeats after every
//     re-registration are no-ops.
//  3. End: a DeregisterNodeRequest is answered before the stream is removed (once it is
//     removed nothing can be sent), then the node is deregistered. A stream that ends
//     without one is a crash: the stream is removed first, so requests in flight fail at
//     once, then the node is marked disconnected and its links fail over.
//
// The node command handler can also close a stream, and the loop then ends the RPC
// with a status that tells the process why, so it does not go on believing it is
// registered:
//   - ABORTED when a newer stream registered the same node id (a reconnect that beat
//     the old stream's end, or a second process with the same id). The newer stream
//     keeps the node; the old one's end is not a crash. Both ends log it at warn
//     level; two processes with one id keep displacing each other at their reconnect
//     backoff, and the warnings repeat until one is fixed.
//
// A newer stream takes a node id whose session is live only if its caller proves the
// same identity as the session's (claims.go): the same verified client certificate
// identity and registration-auth identity, or — when neither side proved one — the
// same peer host. Any other caller gets the id only once the session fails to answer
// a connection list request within the probe timeout (5 s); while it answers, the
// caller is refused with ALREADY_EXISTS. Every replacement and refusal is logged at
// warn level with both peers and identities.
//   - RESOURCE_EXHAUSTED when a send to the node missed the send deadline (10 s by
//     default, nodestream.WithSendTimeout): the node stopped reading. It is evicted —
//     disconnected like a crash — so no reconciler waits on it, and is rebuilt when it
//     registers again.
package southbound
