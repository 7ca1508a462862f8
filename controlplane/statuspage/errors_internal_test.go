package statuspage

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/switchboard-mesh/switchboard/controlplane/reconcile"
)

// TestErrorLogKeepsTheNewest: the log holds the last max errors, newest first, and
// skips successes and requests to retry soon.
func TestErrorLogKeepsTheNewest(t *testing.T) {
	l := NewErrorLog(3)
	obs := l.Observe("link")
	obs("a/n1", time.Millisecond, nil)
	obs("a/n1", time.Millisecond, fmt.Errorf("wait: %w", reconcile.ErrRetrySoon))
	if got := l.Recent(); len(got) != 0 {
		t.Fatalf("recorded a success or a retry: %+v", got)
	}
	for i := range 5 {
		obs(fmt.Sprintf("a/n%d", i), time.Millisecond, errors.New("boom"))
	}
	got := l.Recent()
	if len(got) != 3 || got[0].Node != "a/n4" || got[1].Node != "a/n3" || got[2].Node != "a/n2" ||
		got[0].Reconciler != "link" || got[0].Error != "boom" {
		t.Fatalf("recent = %+v, want a/n4, a/n3, a/n2 from the link reconciler", got)
	}
}
