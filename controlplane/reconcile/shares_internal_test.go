package reconcile

import (
	"testing"

	"github.com/switchboard-mesh/switchboard/controlplane/store"
)

// TestSharesTracked: an untracked subscription listed under one name of a connection
// is the tracked route's own when another name of the same connection carries the
// tracked route for that name; deleting it would delete the route's subscription.
func TestSharesTracked(t *testing.T) {
	n, other := store.NewName("a", "b", "c"), store.NewName("a", "b", "d")
	conns := map[string]liveConn{"old": {"e:1", 7}, "new": {"e:1", 7}, "elsewhere": {"e:2", 8}, "unknown": {"e:3", 0}}
	tracked := map[subKey]bool{{n, "new"}: true}
	for _, c := range []struct {
		k    subKey
		want bool
	}{
		{subKey{n, "old"}, true},         // same connection, same name, tracked over new
		{subKey{other, "old"}, false},    // another name
		{subKey{n, "elsewhere"}, false},  // another connection
		{subKey{n, "unknown"}, false},    // the node did not say which connection
		{subKey{n, "not-listed"}, false}, // no such link on the node
	} {
		if got := sharesTracked(c.k, tracked, conns); got != c.want {
			t.Errorf("sharesTracked(%s over %s) = %v, want %v", c.k.name, c.k.link, got, c.want)
		}
	}
}
