// Package xds serves the agent's view of the registry over xDS, so that Envoy and
// proxyless gRPC clients (grpc-go's xds resolver, and its Java and C++ siblings)
// find Switchboard's endpoints without another discovery daemon.
//
// It builds Envoy v3 resources from the mirrored endpoints and serves them with
// go-control-plane's snapshot cache: ADS and the SotW and delta variants of LDS, RDS,
// CDS and EDS. docs/discovery.md describes the resources, names and the mapping of
// priority and weight.
package xds
