// Package tlsutil builds the TLS configurations of Switchboard's gRPC links — mTLS
// from PEM files, or from SPIFFE SVIDs fetched from the Workload API with go-spiffe —
// with peers authorised by SPIFFE trust domain (docs/security.md explains who may
// connect and how).
//
// What tests need to exercise those links for real (a throw-away CA, a Workload API
// server) is in internal/tlsutil/tlstest.
package tlsutil
