package statuspage

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/switchboard-mesh/switchboard/controlplane/nodestream"
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

// TestErrorLogTracksSilentNodes: a visit that timed out marks the node not
// answering since the start of its silence; any other outcome of a later visit — a
// success, another error, a stream gone — clears the mark.
func TestErrorLogTracksSilentNodes(t *testing.T) {
	l := NewErrorLog(10)
	link, route := l.Observe("link"), l.Observe("route")
	since := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	timeout := fmt.Errorf("list connections of a/n1: %w", &nodestream.TimeoutError{Node: "a/n1", Waited: time.Second, Since: since})
	link("a/n1", time.Second, timeout)
	route("a/n1", time.Second, timeout)
	link("a/n2", time.Millisecond, nil)
	if got := l.NotAnswering(); len(got) != 1 || !got["a/n1"].Equal(since) {
		t.Fatalf("NotAnswering = %v, want a/n1 since %v", got, since)
	}
	for _, err := range []error{nil, errors.New("ack: subscribe failed"), nodestream.ErrStreamClosed} {
		link("a/n1", time.Second, timeout)
		route("a/n1", time.Millisecond, err)
		if got := l.NotAnswering(); len(got) != 0 {
			t.Fatalf("after a visit that ended with %v, NotAnswering = %v", err, got)
		}
	}
}
