// Package access guards the control plane's northbound API (ControlPlaneService):
// it names the role each method needs (viewer lists, admin mutates), works out who a
// caller is — a bearer token from the token file, or the identity of a verified
// client certificate — and enforces the table in a gRPC interceptor. Every successful
// mutation is written to the audit log, with the caller and the change.
//
// Tokens are stored only as SHA-256 hashes. See docs/controlplane.md ("Northbound
// access") and docs/security.md.
package access
