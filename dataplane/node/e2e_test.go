package node_test

import (
	"testing"
	"time"
)

const star = `links:
  - group: cloud
    neighbors: ["*"]
`

// TestTwoGroupsThroughHub: a message published in group a reaches a subscriber in
// group b through the hub group cloud, over real links the control plane made.
func TestTwoGroupsThroughHub(t *testing.T) {
	f := startFabric(t, star, 1, "cloud", "a", "b")
	s := clientOf(t, f, "b/n1").subscribe("org/ns/svc")
	pub := clientOf(t, f, "a/n1")
	ctx := deadline(t, 30*time.Second)
	if err := pub.publishUntil(ctx, "org/ns/svc", "hello", false); err != nil {
		t.Fatal(err)
	}
	m, err := s.next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if string(m.GetPayload()) != "hello" || m.GetOrigin() != "a/n1" {
		t.Fatalf("got %q from %s, want hello from a/n1", m.GetPayload(), m.GetOrigin())
	}
}
