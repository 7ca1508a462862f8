package node

import (
	"fmt"
	"testing"
)

// TestLinkOwnersEvictOnlyThePresentersOwn: a group that presents link id after link id
// pushes out only its own oldest bindings, never another group's, which would free
// that group's links for anyone to claim.
func TestLinkOwnersEvictOnlyThePresentersOwn(t *testing.T) {
	var o linkOwners
	o.bind("cloud-link", "cloud")
	for i := range maxLinkOwners + 10 {
		o.bind(fmt.Sprintf("made-up-%d", i), "edge-a")
	}
	if g, ok := o.get("cloud-link"); !ok || g != "cloud" {
		t.Fatalf("cloud's binding after edge-a presented %d ids: %q, %v", maxLinkOwners+10, g, ok)
	}
	if _, ok := o.get("made-up-0"); ok {
		t.Error("edge-a's oldest binding outlived its share")
	}
	if g, ok := o.get(fmt.Sprintf("made-up-%d", maxLinkOwners+9)); !ok || g != "edge-a" {
		t.Errorf("edge-a's newest binding: %q, %v", g, ok)
	}
}
