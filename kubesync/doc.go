// Package kubesync keeps Kubernetes Services and the registry in line, in either
// direction or both, as consul-k8s's catalog sync does.
//
//   - Export (registry → Kubernetes, export.go): each selected registry service
//     becomes a selector-less Service with EndpointSlices in one namespace, so
//     CoreDNS and kube-proxy serve other clusters' endpoints to plain pods.
//   - Import (Kubernetes → registry, import.go): each ready address×port of the
//     EndpointSlices of one namespace becomes a registry entry of this cluster, with
//     a TTL that is refreshed while it is present, so a syncer that dies leaves
//     nothing behind for longer than the TTL.
//
// The package owns what it creates and nothing else: Services and slices carry its
// labels (labels.go), and it never changes or deletes an object without them; the
// entries it registers carry switchboard.dev/origin=kubernetes. Each direction skips
// what the other wrote, so nothing syncs back to where it came from.
//
// Both directions follow the sample-controller shape: informer caches, a typed
// rate-limited work queue keyed by service name, and an idempotent sync per key
// (controller.go). Run (syncer.go) wires them.
//
// It depends on the registry contract (package registry, and registry/follow for the
// change feed) and client-go only. It must not import a registry backend, the agent,
// the registrar, the control plane, the data plane or cmd/: the command chooses the
// backend and serves /metrics and /readyz.
package kubesync
