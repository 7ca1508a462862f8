// Package reconcile converges data-plane nodes toward the control plane's desired state
// (docs/controlplane.md, "How it converges": link and route reconciliation, failure
// handling, periodic reconciliation).
//
// Two reconcilers, one for links and one for routes, each run parallel workers on a
// k8s.io/client-go/util/workqueue rate-limited queue keyed by node id: exponential
// backoff from the base retry delay capped at 30 s, a key dropped after max_requeues
// failures (the periodic sweep brings it back), and "connection not found" retried
// without consuming a retry.
//
// With tracing on (internal/tracing), each pass of either reconciler over a node is
// a trace of its own (tracing.go).
package reconcile
