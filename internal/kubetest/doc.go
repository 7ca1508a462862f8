// Package kubetest runs a real kube-apiserver, backed by an in-process etcd, for
// tests that must see what the Kubernetes API server itself does: field selectors,
// the status subresource, RBAC, watch semantics. A fake clientset checks none of
// those.
//
// It owns building and caching the kube-apiserver binary (through internal/toolbin,
// from the separate module tools/kube-apiserver, so the main module never requires
// k8s.io/kubernetes), the server's credentials (a service-account key and an admin
// bearer token in system:masters), and the child process's lifetime. Only the API
// server runs: no controller-manager, scheduler or kubelet, so pods are plain
// objects, no default service account is created, and deleted namespaces are never
// finalized.
//
// The server is opt-in because building it takes minutes and running it ~270 MB:
// Start skips the test unless SWITCHBOARD_KUBE=1 (build it once into the user cache
// directory) or SWITCHBOARD_KUBE_APISERVER=path (use that binary) is set; `make
// test-kube` sets the first and runs the tests named *Kube*.
//
// It must not import any switchboard package other than internal/ test helpers, so
// that every package under test can use it.
package kubetest
