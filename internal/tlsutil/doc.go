// Package tlsutil builds the TLS configurations of Switchboard's gRPC links — mTLS
// from PEM files, or from SPIFFE SVIDs fetched from the Workload API with go-spiffe —
// with peers authorised by SPIFFE trust domain (spec/registrar.md, "Open Questions":
// SPIRE integration).
//
// It also carries what tests need to exercise those links for real: a throw-away CA
// that issues SVID-shaped certificates (testca.go), and a Workload API server that
// hands them out over a unix socket the way a SPIRE agent does (workloadapi.go).
package tlsutil
