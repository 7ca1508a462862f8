// Package nodeauth implements registration authentication for data-plane nodes
// (docs/controlplane.md, "Registration auth"): both sides of it, the control plane's
// verifiers and the nodes' token providers. It must import neither controlplane/ nor
// dataplane/: both import it.
//
// The control plane holds an Authenticator and calls Verify with the credentials,
// group name and node id of every RegisterNodeRequest before it saves anything; any
// error is a denial that the southbound service reports as PermissionDenied with the
// error text as the reason. A data-plane node holds the matching TokenProvider and puts
// its Token in the request's credentials field; when Token fails the node aborts the
// registration attempt instead of sending empty credentials.
//
// Three kinds exist:
//
//   - Noop (the default): accepts every node; its provider returns "".
//   - SharedSecret: one secret of at least 32 bytes per group. The token is an
//     HMAC-SHA256 over the identity "{group}/{node_id}", an issued-at time and a random
//     nonce (format in token.go). A verifier accepts it once, within a time window.
//   - SPIFFE: the node presents a JWT-SVID fetched from the SPIFFE Workload API for
//     the control plane's audience; the control plane validates it against trust
//     bundles and requires the SPIFFE ID to name the node (SPIFFENode: the trust
//     domain is the group, the last path segment the node id). A verifier accepts a
//     token once within its lifetime, so the provider asks for a new one each time
//     (with a random extra audience, past the Workload API's cache).
//
// Verifiers that implement IdentityVerifier also say who the credentials proved the
// node to be; the control plane compares that when a second registration claims a
// connected node's id.
//
// Every denial matches one of the sentinel errors below with errors.Is, so callers
// can branch on the cause and operators read a precise reason.
package nodeauth
