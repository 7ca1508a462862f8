// Package server assembles a running control plane from its configuration file
// (docs/controlplane.md, "Architecture", "Periodic Reconciliation" and
// "Configuration Reference"): the store (in-memory or SQLite), the core service in
// config or API mode, registration auth, the node command handler, the link and route
// reconcilers on their work queues with the periodic full sweep, the southbound
// (ControllerService) and northbound (ControlPlaneService) gRPC endpoints with TLS or
// mTLS, northbound roles and the audit log (controlplane/access), and an HTTP port with /healthz, /readyz and /metrics.
//
// New binds every listener, so port 0 is resolved before Run; Run serves until its
// context ends and then shuts down in order: readiness off, northbound drained,
// southbound streams closed (not counted as node crashes), reconcilers stopped, store
// closed.
package server
