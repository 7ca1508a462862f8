package pods_test

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/switchboard-mesh/switchboard/agent/pods"
	"github.com/switchboard-mesh/switchboard/endpoint"
)

// TestDeriveDrainsATerminatingPod: a Ready pod that is being deleted keeps its
// entries, as draining, until it is gone: it finishes the requests it has while
// routers send it nothing new. One that was not published (not Ready) yields
// nothing, as before.
func TestDeriveDrainsATerminatingPod(t *testing.T) {
	deleting := func(p *corev1.Pod) { now := metav1.Now(); p.DeletionTimestamp = &now }
	got, skip := pods.Derive(newPod("web-1", withIPs("10.0.0.1"), deleting), nil, deriveConfig())
	if skip != "" || len(got) != 1 {
		t.Fatalf("Derive(terminating) = %v, %q; want one entry", got, skip)
	}
	if e := got[0]; e.Endpoint.Health != endpoint.Draining || e.Held != "" {
		t.Fatalf("terminating pod's entry: health %v, held %q; want draining, published", e.Endpoint.Health, e.Held)
	}
	got, _ = pods.Derive(newPod("web-2", withIPs("10.0.0.2"), withReady(false), deleting), nil, deriveConfig())
	if len(got) != 0 {
		t.Fatalf("Derive(terminating, not Ready) = %v, want nothing", got)
	}
	got, _ = pods.Derive(newPod("web-3", withIPs("10.0.0.3")), nil, deriveConfig())
	if len(got) != 1 || got[0].Endpoint.Health != endpoint.Healthy {
		t.Fatalf("Derive(running) = %v, want one healthy entry", got)
	}
}
